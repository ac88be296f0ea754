// diff_logs --html: draws the report from the JSON embedded in the page (#numprobe-data):
// { report: the --json document, grid: the heat map, curves: full-precision series }.
// Chart.js draws the summary bars and the curves (log axes, tooltips); D3 gives the heat map's
// log colour scale, its legend axis and number formats; the heat map itself is painted into
// an ImageData (one pixel per cell) and scaled onto a canvas that shows the visible part only,
// so 1,000 x 1,000 cells draw as fast as 10 x 10. docs/diff-logs.md describes the page.
(function () {
  'use strict';

  var DATA = JSON.parse(document.getElementById('numprobe-data').textContent);
  var parsedAt = performance.now();
  var R = DATA.report;
  var KINDS = ['param', 'rng', 'input', 'output', 'tap', 'output_grad', 'mb_grad', 'grad', 'scalar',
               'optim', 'op'];
  var PHASE = {param: 'step begin', rng: 'forward', input: 'forward', output: 'forward',
               tap: 'forward', output_grad: 'backward', mb_grad: 'backward', grad: 'step end',
               scalar: 'step end', optim: 'step end', op: 'forward'};
  var CLASSES = ['equal', 'within_tol', 'different', 'only_base', 'only_test', 'none_one_side',
                 'unsupported'];
  // Cell codes: the class index in the low 3 bits (7 = NaN/Inf on a side) and above them
  // 1 + the index of the pair's explanation in grid.rules (0: none); 255 = no record.
  var NONFINITE = 7, ABSENT = 255;
  var CLASS_COLOR = {
    equal: '#2ca02c', within_tol: '#98df8a', different: '#d62728', only_base: '#ff7f0e',
    only_test: '#ffbb78', none_one_side: '#7b4ea3', unsupported: '#a0a0a0'
  };
  var CELL_COLOR = {  // the heat map's fixed colours; 'different'/'within_tol' use the scale
    equal: '#2ca02c', none_one_side: '#7b4ea3', only_base: '#1f77b4', only_test: '#17becf',
    nonfinite: '#000000', unsupported: '#b0b0b0', absent: '#f4f4f4'
  };

  // ---- small helpers ---------------------------------------------------------------------
  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) Object.keys(attrs).forEach(function (k) {
      if (k === 'text') e.textContent = attrs[k];
      else if (k === 'class') e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    });
    (children || []).forEach(function (c) {
      if (c !== null && c !== undefined) e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    });
    return e;
  }
  function section(id, title) {
    var s = el('section', {id: id}, [el('h2', {text: title})]);
    document.getElementById('app').appendChild(s);
    return s;
  }
  // Numbers as the text report writes them: full precision (shortest round-trip), '-' for
  // none; the JSON carries NaN/Inf as strings.
  function fmt(v) {
    if (v === null || v === undefined) return '-';
    if (typeof v === 'string') return v;
    return String(v);
  }
  // A number as the text report prints it: std::to_chars' shortest round trip, the shorter of
  // fixed and scientific notation (fixed on a tie, the exponent of at least two digits).
  function num(v) {
    if (v === null || v === undefined) return '-';
    if (typeof v === 'string') return v;
    if (isNaN(v)) return 'nan';
    if (!isFinite(v)) return v > 0 ? 'inf' : '-inf';
    if (v === 0) return Object.is(v, -0) ? '-0' : '0';
    var m = /^(-?)(\d)(?:\.(\d+))?e([+-])(\d+)$/.exec(v.toExponential());
    var sign = m[1], digits = m[2] + (m[3] || ''), exp = (m[4] === '-' ? -1 : 1) * Number(m[5]);
    var sci = sign + m[2] + (m[3] ? '.' + m[3] : '') + 'e' + m[4] + (m[5].length < 2 ? '0' : '') + m[5];
    var fixed = exp >= digits.length - 1 ? sign + digits + '0'.repeat(exp - digits.length + 1)
      : exp >= 0 ? sign + digits.slice(0, exp + 1) + '.' + digits.slice(exp + 1)
      : sign + '0.' + '0'.repeat(-exp - 1) + digits;
    return fixed.length <= sci.length ? fixed : sci;
  }
  // d3's trimmed formats ('~e', '~g') also cut a trailing zero of the exponent (3.607e-10
  // became 3.607e-1): short forms are made here.
  function short(v) { return String(Number(v.toPrecision(4))); }
  function expShort(v, digits) {
    if (v === 0) return '0';
    return v.toExponential(digits).replace(/\.?0+e/, 'e').replace('e+', 'e');
  }
  function fmtShort(v) {
    if (v === null || v === undefined) return '-';
    if (typeof v === 'string') return v;
    if (!isFinite(v)) return String(v);
    return short(v);
  }
  function seriesTitle(s) {
    return s.kind + ' ' + s.name + (s.mb !== null && s.mb !== undefined ? ' mb=' + s.mb : '');
  }
  // A pair's phase: its own (an op record runs in forward or backward), else its kind's.
  function phaseOf(p) { return p.phase ? p.phase.replace('_', ' ') : PHASE[p.kind]; }
  function where(p) {
    return 'step ' + p.step + '  ' + phaseOf(p) + (p.mb !== null ? '  mb ' + p.mb : '') + '  ' +
           p.kind + ' ' + p.name;
  }
  function decode(b64, Type) {
    var bin = atob(b64), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; ++i) bytes[i] = bin.charCodeAt(i);
    return new Type(bytes.buffer);
  }
  function fail(err) {  // an error in one panel: shown, counted, the other panels still draw
    window.dispatchEvent(new ErrorEvent('error', {message: String(err && err.stack || err), error: err}));
  }
  function guarded(fn) {
    try { fn(); } catch (e) { fail(e); }
  }

  // ---- 1. header: the runs and the RESULT line ---------------------------------------------
  function runLine(label, i) {
    var what = i.python ? 'NumericsLogger log' :
      i.ranks_found + '/' + i.world_size + ' ranks' + (i.setup ? ', ' + i.setup : '');
    var steps = i.steps + (i.first_step !== null ? ' [' + i.first_step + '..' + i.last_step + ']' : '');
    return el('tr', null, [el('th', {text: label}), el('td', {class: 'path', text: i.path}),
      el('td', {text: what}), el('td', {class: 'nowrap', text: 'steps ' + steps}),
      el('td', {class: 'nowrap', text: i.records + ' records'}),
      el('td', {class: 'nowrap', text: i.torch ? 'torch ' + i.torch : ''})]);
  }
  function pairCount(cls) {
    return KINDS.reduce(function (n, k) { return n + (R.summary[k] ? R.summary[k][cls] : 0); }, 0);
  }
  // The RESULT line's words, as the text report writes them (report_text.cpp, result_text).
  function resultText() {
    var unsupported = pairCount('unsupported'), o = R.options;
    var notCompared = unsupported ? ' (' + unsupported + ' unsupported pair(s) not compared)' : '';
    switch (R.result) {
      case 'different': return 'differences found';
      case 'noise':
        return 'differences found, every one explained as noise (' + R.noise.pairs +
               ' pair(s), largest relative difference ' + num(R.noise.max_rel_diff) +
               '); --strict counts them as differences';
      case 'run_errors': return 'the runs agree, but a run has errors (RUN ISSUES)';
      case 'incomplete': {
        var at = R.truncated_at;
        return 'incomplete: ' + (at > 0 ? 'no difference through step ' + (at - 1) + ', but ' : '') +
               "a run's log ends early, at step " + at + ' (rank killed?)' +
               (at > 0 ? '; --steps :' + (at - 1) + ' compares the complete steps alone' : '');
      }
      case 'nothing_compared': {
        var filtered = o.kinds || o.steps[0] !== null || o.steps[1] !== null || o.name;
        if (R.records_compared > 0)
          return 'nothing compared: all ' + R.records_compared +
                 ' pairs are unsupported (see the notes above and in --json)';
        if (R.kinds_left_out && !filtered)
          return 'nothing compared: the runs share no kind (kinds in one run only); --kinds all compares them';
        return filtered ? 'nothing compared: no record passes --kinds, --steps and --name'
                        : 'nothing compared: the runs hold no records';
      }
      case 'within_tolerance':
        return 'equal within tolerance (' + pairCount('within_tol') + ' pair(s) not bitwise equal)' + notCompared;
    }
    return 'equal' + notCompared;
  }
  function drawHeader() {
    var h = el('header', {id: 'header'});
    document.getElementById('app').appendChild(h);
    h.appendChild(el('h1', {text: 'numprobe: where two runs stop agreeing'}));
    h.appendChild(el('table', {class: 'runs'}, [runLine('base', R.base), runLine('test', R.test)]));
    // Exit 4 (every difference noise) is no failure and no clean pass either.
    var tone = R.exit_code === 0 ? 'ok' : R.exit_code === 4 ? 'warn' : 'bad';
    h.appendChild(el('p', {id: 'result', class: tone, 'data-result': R.result,
                           'data-exit-code': String(R.exit_code)},
      ['RESULT: ' + resultText() + ' (exit ' + R.exit_code + ')']));
    var o = R.options, opts = [];
    opts.push('paired steps ' + R.paired_steps + ', records compared ' + R.records_compared);
    opts.push(o.rtol || o.atol ? 'tolerance rtol=' + o.rtol + ' atol=' + o.atol : 'bitwise comparison');
    if (o.strict) opts.push('--strict');
    if (o.kinds) opts.push('--kinds ' + o.kinds.join(','));
    if (o.steps[0] !== null || o.steps[1] !== null)
      opts.push('--steps ' + (o.steps[0] === null ? '' : o.steps[0]) + ':' + (o.steps[1] === null ? '' : o.steps[1]));
    if (o.name) opts.push('--name ' + o.name);
    h.appendChild(el('p', {class: 'options', text: opts.join(' · ')}));
    // What else needs reading, one line each: the details are further down.
    if (R.truncated_at !== null)
      h.appendChild(el('p', {class: 'warn', text: "a rank's log ends early (killed?): steps from " +
                             R.truncated_at + ' on are read but not compared'}));
    [['base', R.base], ['test', R.test]].forEach(function (bt) {
      var types = Object.keys(bt[1].issue_counts);
      if (types.length)
        h.appendChild(el('p', {class: 'warn issues-line'}, ['Run issues (' + bt[0] + '): ' +
          types.map(function (t) { return t + '=' + bt[1].issue_counts[t]; }).join('  ') + ' ',
          el('a', {href: '#issues', text: '(below)'})]));
    });
    [['kinds_only_base', 'test'], ['kinds_only_test', 'base']].forEach(function (kl) {
      if (R[kl[0]].length)
        h.appendChild(el('p', {class: 'warn', text: 'kinds in one run only: the ' + kl[1] +
                               ' run recorded no ' + R[kl[0]].join(', ') + ' (PROBE_KINDS?)' +
                               (R.kinds_left_out ? ': left out of the comparison (--kinds all compares them)' : '')}));
    });
    // Pairs set aside, one line each: partial sums (a tensor-parallel rank's summand) against records
    // that are not, records covering other microbatches than the other run's (expert parallelism).
    function setAsideLine(report, id, label, one, many, why) {
      if (!report || !report.pairs) return;
      var kinds = Object.keys(report.by_kind).map(function (k) { return report.by_kind[k] + ' ' + k; });
      // Two examples: the line sits above the first screen's panel, which it must not push down.
      var shown = report.examples.slice(0, 2);
      var examples = shown.join('; ') + (report.pairs > shown.length ? '; ...' : '');
      h.appendChild(el('p', {class: 'note', id: id, 'data-pairs': String(report.pairs),
        text: label + ': ' + kinds.join(', ') + (report.pairs === 1 ? one : many) + why + ': set aside, not compared' +
              (report.examples.length ? ' (' + examples + ')' : '')}));
    }
    setAsideLine(R.partial_records, 'partial-records', 'partial records', ' record is a partial sum',
                 ' records are partial sums', " without a like counterpart in the other run (a tensor-parallel rank's summand)");
    setAsideLine(R.covered_records, 'covered-records', 'covered microbatches', ' record covers', ' records cover',
                 " other microbatches than the other run's (an expert's gradient from one expert-parallel dispatch" +
                 ' over several microbatches)');
    setAsideLine(R.regrouped_records, 'regrouped-records', 'regrouped microbatches', ' record is', ' records are',
                 ' of microbatches the runs fill with other groups of the same samples (another accumulation count or' +
                 " batch size, another sampler): the step's records judge it");
  }
  function drawIssues() {
    var runs = [['base', R.base], ['test', R.test]].filter(function (bt) {
      return Object.keys(bt[1].issue_counts).length;
    });
    if (!runs.length) return;
    var s = section('issues', 'Run issues');
    runs.forEach(function (bt) {
      var run = bt[1], types = Object.keys(run.issue_counts);
      var box = el('div', {class: 'issues', 'data-run': bt[0]}, [
        el('h3', {text: 'Run issues (' + bt[0] + '): ' +
                  types.map(function (t) { return t + '=' + run.issue_counts[t]; }).join('  ')})]);
      run.hints.forEach(function (hint) { box.appendChild(el('p', {class: 'hint', text: hint})); });
      var ul = el('ul');
      run.issues.forEach(function (i) {
        ul.appendChild(el('li', {class: i.severity}, [
          el('b', {text: i.severity + ' ' + i.type}), (i.step !== null ? ' (step ' + i.step + ')' : '') + ': ' + i.message]));
      });
      box.appendChild(ul);
      s.appendChild(box);
    });
  }

  // ---- 2. the headline: first unexplained divergence, its cause, the noise in words ----------
  // A side as the text report prints it (report_text.cpp, side_text): figures as key=value,
  // each a span so that the ones differing from the other side can be marked.
  function rankList(ranks) {
    var out = [];
    for (var i = 0; i < ranks.length; ++i) {
      var j = i;
      while (j + 1 < ranks.length && ranks[j + 1] === ranks[j] + 1) ++j;
      out.push(j > i ? ranks[i] + '-' + ranks[j] : String(ranks[i]));
      i = j;
    }
    return out.join(',');
  }
  function sideFigures(side, kind) {  // [[key, value]...] lines: the first, then min/max/mean
    if (side === null) return [[['', '(absent)']]];
    if (side.state === 'none') return [[['', 'none']]];
    if (side.state === 'scalar') return [[['value', num(side.value)]]];
    if (side.unsupported !== undefined) return [[['', 'unsupported (' + side.unsupported + ')']]];
    var first = [], extra = [];
    // A NumericsLogger record has torch.hash_tensor's value alone: the hash it is compared by.
    if (side.hash !== undefined) first.push(['hash', side.hash]);
    else if (side.torch_hash !== undefined) first.push(['hash', side.torch_hash]);
    if (kind !== 'rng' && side.norm !== undefined) first.push(['norm', num(side.norm)]);
    if (side.hash !== undefined && side.torch_hash !== undefined) first.push(['torch_hash', side.torch_hash]);
    if (side.dtype) first.push(['', side.dtype + '[' + side.shape.join(',') + ']']);
    if (kind !== 'rng' && side.min !== undefined) {
      extra = [['min', num(side.min)], ['max', num(side.max)], ['mean', num(side.mean)]];
      if (side.nan || side.inf) extra.push(['nan', String(side.nan)], ['inf', String(side.inf)]);
    }
    return extra.length ? [first, extra] : [first];
  }
  function ranksText(side) {
    if (side === null || !side.ranks || !side.ranks.length || side.ranks[0] < 0) return '';
    if (!side.replicas_disagree) return '  (rank ' + rankList(side.ranks) + ')';
    return '  (rank ' + rankList(side.value_ranks) + '; ranks ' + rankList(side.ranks) +
           ' disagree, see Run issues)';
  }
  function sideLines(p) {
    var b = sideFigures(p.base, p.kind), t = sideFigures(p.test, p.kind);
    function valueOf(lines, key) {
      for (var i = 0; i < lines.length; ++i)
        for (var j = 0; j < lines[i].length; ++j) if (lines[i][j][0] === key) return lines[i][j][1];
      return undefined;
    }
    function lineCells(lines, other, side) {
      return lines.map(function (figs, n) {
        var spans = [];
        figs.forEach(function (f) {
          if (spans.length) spans.push(' ');
          var differs = f[0] ? valueOf(other, f[0]) !== f[1] : !valueOf(other, '') || valueOf(other, '') !== f[1];
          spans.push(el('span', {class: differs ? 'fig differs' : 'fig', text: f[0] ? f[0] + '=' + f[1] : f[1]}));
        });
        if (n === 0) spans.push(ranksText(side));
        return el('tr', null, [el('th', {text: n === 0 ? (side === p.base ? 'base:' : 'test:') : ''}),
                               el('td', {class: 'mono'}, spans)]);
      });
    }
    return el('table', {class: 'side-lines'}, lineCells(b, t, p.base).concat(lineCells(t, b, p.test)));
  }
  function relDiffText(p) {
    function nanNorm(side) { return side !== null && side.norm === 'nan'; }
    var nb = nanNorm(p.base), nt = nanNorm(p.test);
    if (nb || nt) return 'n/a (NaN in ' + (nb && nt ? 'both' : nb ? 'base' : 'test') + ')';
    return num(p.rel_diff);
  }
  // "noise: summation_order (within 9.5e-07)": the text report's label of a noise pair.
  function noiseLabel(p) {
    var e = p.explanation;
    if (!e || e.category !== 'noise') return '';
    if (e.detail) return 'noise: ' + e.rule + ' (' + e.detail + (e.bound ? '; within ' + num(e.bound) : '') + ')';
    return 'noise: ' + e.rule + (e.bound ? ' (within ' + num(e.bound) + ')' : '');
  }
  // A pair as the text report's headline: where, class, both sides, the difference, the note.
  function pairBlock(p, id, label) {
    var box = el('div', {class: 'divergence', id: id, 'data-step': String(p.step), 'data-kind': p.kind,
                         'data-name': p.name, 'data-class': p['class']});
    box.appendChild(el('p', {class: 'where-line'}, [el('span', {class: 'where', text: where(p)}),
      '  [' + p['class'] + ']', label ? el('span', {class: 'label', text: '  ' + label}) : null]));
    box.appendChild(sideLines(p));
    if (p.rel_diff && p.kind !== 'rng')
      box.appendChild(el('p', {class: 'line', text: 'relative norm difference: ' + relDiffText(p)}));
    if (p.note) box.appendChild(el('p', {class: 'note line', text: 'note: ' + p.note}));
    return box;
  }
  function evidenceText(c) {
    return Object.keys(c.evidence || {}).map(function (k) { return k + '=' + c.evidence[k]; }).join(' ');
  }
  function causeBlock(c, id) {
    var box = el('div', {class: 'cause', id: id, 'data-rule': c.rule}, [
      el('p', null, [el('span', {class: 'rule', text: '[' + c.rule + ']'}), ' ' + c.message])]);
    var ev = evidenceText(c);
    if (ev) box.appendChild(el('p', {class: 'evidence'}, [el('span', {class: 'muted', text: 'evidence: '}),
                                                          el('span', {class: 'mono', text: ev})]));
    return box;
  }
  function count(n) { return Number(n).toLocaleString('en-US'); }
  // A relative difference in words: two significant digits.
  function relWords(v) {
    if (typeof v !== 'number') return String(v);
    return v >= 1e-3 && v < 1e3 ? String(Number(v.toPrecision(2))) : expShort(v, 1);
  }
  // The NOISE section in words: how many pairs, by which rule, how large, and the bugs.
  function noiseWords() {
    var n = R.noise, bugs = n.bug_pairs;
    var bugText = bugs === 0 ? 'none is a bug' :
      count(bugs) + (bugs === 1 ? ' divergent pair has' : ' divergent pairs have') + ' a bug-class explanation';
    if (!R.first_divergence) return 'No divergent pair: nothing to explain.';
    if (!n.pairs) return 'No divergent pair is explained as noise; ' + bugText + '.';
    var rules = Object.keys(n.by_rule).sort(function (a, b) { return n.by_rule[b] - n.by_rule[a]; })
      .map(function (r) { return r + ' ' + count(n.by_rule[r]); });
    return count(n.pairs) + (n.pairs === 1 ? ' divergent pair' : ' divergent pairs') + ' explained as noise (' +
           rules.join(', ') + '), largest relative difference ' + relWords(n.max_rel_diff) + '; ' + bugText + '.';
  }
  function noiseByKindWords() {
    var k = R.noise.by_kind, kinds = KINDS.filter(function (x) { return k[x]; });
    if (!kinds.length) return '';
    return 'By kind: ' + kinds.map(function (x) {
      return x + ' ' + count(k[x].pairs) + ' (largest ' + relWords(k[x].max_rel_diff) + ')';
    }).join(', ') + '.';
  }
  function samePair(a, b) {
    return a && b && a.step === b.step && a.kind === b.kind && a.name === b.name && a.mb === b.mb;
  }
  // Every independent divergence, ranked by its effect on training, as the text report lists
  // them: where there are several, or one whose effect is not shown.
  function independentBlock() {
    var all = R.independent_divergences || [];
    if (!all.length || (all.length === 1 && all[0].effect === 'training')) return null;
    var items = all.map(function (d, i) {
      return el('li', {class: 'independent', 'data-effect': d.effect, 'data-rule': d.rule}, [
        el('span', {class: 'rule', text: '[' + d.rule + '] '}), el('span', {class: 'where', text: where(d)}),
        el('span', {class: 'effect ' + d.effect, text: ' ' + d.effect_words}),
        i > 0 ? el('p', {class: 'note line', text: d.cause.message}) : null]);
    });
    return el('div', {id: 'independent'}, [
      el('h3', {text: all.length === 1 ? 'Independent divergences: the headline' :
                'Independent divergences: ' + all.length + ', ranked by their effect on training'}),
      el('ol', null, items)]);
  }
  // What the text report headlines: the first unexplained divergence (with --strict, the first
  // divergence), the cause that explains it, and the noise summary in words.
  function drawHeadline() {
    var strict = R.options && R.options.strict;
    var u = strict ? null : R.first_unexplained_divergence;
    var fd = R.first_divergence;
    var s = section('headline', strict ? 'First divergence' : 'First unexplained divergence');
    s.setAttribute('data-headline', strict ? 'strict' : u ? 'unexplained' : fd ? 'noise' : 'none');
    if (!fd) {
      s.appendChild(el('p', {class: 'ok verdict', id: 'no-divergence', text: 'None: every compared pair agrees' +
        (R.result === 'within_tolerance' ? ' (within --rtol/--atol)' : ' bitwise') + '.'}));
    } else if (u) {
      s.appendChild(pairBlock(u, 'fd-headline', ''));
      var c = u.cause || (u.explanation ? {rule: u.explanation.rule, message: '', evidence: {}} : null);
      if (c) s.appendChild(causeBlock(c, 'headline-cause'));
      var list = independentBlock();
      if (list) s.appendChild(list);
    } else if (strict) {
      s.appendChild(pairBlock(fd, 'fd-headline', ''));
      if (R.likely_causes.length) s.appendChild(causeBlock(R.likely_causes[0], 'headline-cause'));
    } else {
      s.appendChild(el('p', {class: 'ok verdict', id: 'no-unexplained',
                             text: 'None: every difference is explained as noise. The first divergence:'}));
      s.appendChild(pairBlock(fd, 'fd-headline', noiseLabel(fd)));
    }
    var replay = replayBlock();
    if (replay) s.appendChild(replay);
    // What the figures cannot decide comes with the next step that can: the trace setting.
    var hint = R.op_trace && R.op_trace.trace_hint;
    if (hint && fd && !u && !strict)
      s.appendChild(el('p', {id: 'headline-next-step', text: "To tell, re-run both with PROBE_TRACE='" + hint +
        "' and compare again: the op records name the op where the runs part."}));
    var noise = el('div', {id: 'noise-summary', 'data-pairs': String(R.noise.pairs),
                           'data-bug-pairs': String(R.noise.bug_pairs)}, [
      el('h3', {text: 'Noise'}), el('p', {text: noiseWords()})]);
    var byKind = noiseByKindWords();
    if (byKind) noise.appendChild(el('p', {class: 'note', text: byKind}));
    s.appendChild(noise);
    if (fd) {
      var btn = el('button', {type: 'button', text: 'show it in the heat map'});
      btn.addEventListener('click', function () { heatmapApi && heatmapApi.reveal(); });
      s.appendChild(btn);
    }
  }

  // ---- 3. the first divergence and its likely causes ------------------------------------------
  function sideRows(p) {
    var fields = [['state', 'state'], ['hash', 'hash'], ['torch_hash', 'torch_hash'], ['norm', 'norm'],
                  ['min', 'min'], ['max', 'max'], ['mean', 'mean'], ['value', 'value'],
                  ['nan', 'nan'], ['inf', 'inf'], ['dtype', 'dtype'], ['shape', 'shape'],
                  ['inputs', 'input hashes'], ['ranks', 'ranks'], ['unsupported', 'unsupported']];
    var rows = [el('tr', null, [el('th'), el('th', {text: 'base'}), el('th', {text: 'test'})])];
    fields.forEach(function (f) {
      function val(side) {
        if (side === null) return '(absent)';
        var v = side[f[0]];
        if (v === undefined) return '';
        if (Array.isArray(v)) {
          var items = v.map(function (x) { return x === null ? '-' : x; });
          return f[0] === 'shape' || f[0] === 'inputs' ? '[' + items.join(',') + ']' : items.join(',');
        }
        return fmt(v);
      }
      var b = val(p.base), t = val(p.test);
      if (b === '' && t === '') return;
      rows.push(el('tr', {class: b !== t ? 'differs' : ''}, [el('th', {text: f[1]}),
        el('td', {class: 'num', text: b}), el('td', {class: 'num', text: t})]));
    });
    return el('table', {class: 'sides'}, rows);
  }
  function divergenceBlock(title, p, id) {
    var box = el('div', {class: 'divergence', id: id, 'data-step': String(p.step), 'data-kind': p.kind,
                         'data-name': p.name, 'data-class': p['class']});
    box.appendChild(el('h3', null, [title + '  ', el('span', {class: 'where', text: where(p)}),
                                    '  [' + p['class'] + ']']));
    box.appendChild(sideRows(p));
    if (p.rel_diff && p.kind !== 'rng')
      box.appendChild(el('p', {text: 'relative norm difference: ' + fmt(p.rel_diff)}));
    if (p.note) box.appendChild(el('p', {class: 'note', text: 'note: ' + p.note}));
    return box;
  }
  // numprobe_replay's verdict on the ops where the runs part (replay in the --json), or the
  // command that makes it where they were dumped.
  function replayBlock() {
    var v = R.replay;
    if (v) {
      var box = el('div', {class: 'replay', id: 'replay-verdict', 'data-verdict': v.verdict}, [
        el('h3', null, ['Replay verdict  ', el('span', {class: v.verdict === 'noise' ? 'ok' : 'bad', text: v.verdict})])]);
      if (v.reason) box.appendChild(el('p', {text: v.reason}));
      v.evidence.forEach(function (line) { box.appendChild(el('p', {class: 'evidence mono', text: line})); });
      box.appendChild(el('p', {class: 'note', text: 'numprobe_replay, ' + v.file}));
      return box;
    }
    if (!R.replay_command && !R.replay_note) return null;
    var cmd = el('div', {class: 'replay', id: 'replay-command'}, [el('h3', {text: 'Replay'})]);
    if (R.replay_note) cmd.appendChild(el('p', {class: 'note', text: R.replay_note}));
    if (R.replay_command) {
      cmd.appendChild(el('p', {text: 'The ops where the runs part were dumped; for a numerical verdict (float64), run'}));
      cmd.appendChild(el('pre', {text: R.replay_command}));
    }
    return cmd;
  }
  // What the op records say (op_trace in the --json): the root-cause op, the first op whose
  // inputs already differ, the PROBE_TRACE setting of a re-run, the ops of one run only.
  function opFinding(title, f, id) {
    var box = el('div', {class: 'op-finding', id: id, 'data-name': f.name, 'data-phase': f.phase});
    box.appendChild(el('h3', null, [title + '  ', el('span', {class: 'where',
      text: 'step ' + f.step + '  ' + f.phase + (f.mb !== null ? '  mb ' + f.mb : '') + '  op ' + f.name})]));
    box.appendChild(el('p', {text: f.message}));
    return box;
  }
  function drawOpTrace(main) {
    var ops = R.op_trace;
    if (!ops) return;
    if (ops.root_cause) main.appendChild(opFinding('Root-cause op', ops.root_cause, 'op-root-cause'));
    else if (ops.beyond_noise) main.appendChild(opFinding('First op beyond the noise it carries', ops.beyond_noise, 'op-beyond-noise'));
    if (ops.inherited) main.appendChild(opFinding('First op with differing inputs', ops.inherited, 'op-inherited'));
    if (ops.trace_hint) {
      main.appendChild(el('h3', {text: 'Op trace'}));
      main.appendChild(el('p', {text: 'The runs diverge where no op was recorded; to find the op, re-run both with'}));
      main.appendChild(el('pre', {id: 'op-trace-hint', text: "PROBE_TRACE='" + ops.trace_hint + "'"}));
      if (R.covered_records && R.covered_records.pairs)
        main.appendChild(el('p', {class: 'note', id: 'op-trace-split', text: 'A run sends tokens to experts ' +
          'on other ranks: op traces of an expert-parallel layout are not aligned with another layout\'s yet; ' +
          'trace it against a run of the same layout.'}));
    }
    [['only_base', 'base'], ['only_test', 'test']].forEach(function (side) {
      var n = ops[side[0] + '_count'];
      if (!n) return;
      main.appendChild(el('p', {class: 'note', text: n + ' op record(s) in the ' + side[1] +
        ' run only (set aside: not compared, not a divergence): ' + ops[side[0]].join('; ') +
        (n > ops[side[0]].length ? '; ...' : '')}));
    });
  }
  // Under the headline: the first divergence when it is another pair (noise), every figure of
  // both sides, the likely causes, the summation-order count and the op trace.
  function drawFirstDivergence() {
    var fd = R.first_divergence;
    if (!fd && !R.likely_causes.length) return;
    var strict = R.options && R.options.strict;
    var u = strict ? null : R.first_unexplained_divergence;
    var headlined = u ? u : fd;
    var s = section('first-divergence', 'First divergence and likely causes');
    if (u && fd && !samePair(u, fd))
      s.appendChild(divergenceBlock('First divergence (' + (noiseLabel(fd) || 'no explanation') + ')', fd, 'fd-first'));
    if (headlined) {
      s.appendChild(el('h3', null, ['Every figure of ', el('span', {class: 'where', text: where(headlined)})]));
      s.appendChild(sideRows(headlined));
    }
    if (R.likely_causes.length) {
      var onFirst = !strict && u && !samePair(u, fd);
      s.appendChild(el('h3', {text: onFirst ? 'Likely cause of the first divergence' : 'Likely cause'}));
      var ul = el('ul', {class: 'causes'});
      R.likely_causes.forEach(function (c) {
        var ev = evidenceText(c);
        ul.appendChild(el('li', {'data-rule': c.rule}, [el('span', {class: 'rule', text: '[' + c.rule + ']'}),
          ' ' + c.message, ev ? el('div', {class: 'evidence mono', text: 'evidence: ' + ev}) : null]));
      });
      s.appendChild(ul);
    }
    if (R.summation_order_grads > 0)
      s.appendChild(el('p', {text: R.summation_order_grads +
        ' grad record(s) differ only at summation-order size with bitwise-equal mb_grads'}));
    drawOpTrace(s);
  }

  // ---- 4. summary: pairs per kind and class -------------------------------------------------
  function drawSummary() {
    var s = section('summary', 'Summary: pairs per kind and class');
    var kinds = KINDS.filter(function (k) {
      var row = R.summary[k];
      return CLASSES.some(function (c) { return row[c] > 0; });
    });
    if (!kinds.length) { s.appendChild(el('p', {text: 'No pair compared.'})); return; }
    var box = el('div', {class: 'chart-box', style: 'height:' + (60 + 34 * kinds.length) + 'px'});
    var canvas = el('canvas', {id: 'summary-chart', role: 'img',
                               'aria-label': 'stacked bars: pairs per kind and class'});
    box.appendChild(canvas);
    s.appendChild(box);
    new Chart(canvas, {
      type: 'bar',
      data: {
        labels: kinds,
        datasets: CLASSES.map(function (c) {
          return {label: c, backgroundColor: CLASS_COLOR[c],
                  data: kinds.map(function (k) { return R.summary[k][c]; })};
        })
      },
      options: {
        indexAxis: 'y', animation: false, maintainAspectRatio: false,
        scales: {x: {stacked: true, title: {display: true, text: 'pairs'}}, y: {stacked: true}},
        plugins: {legend: {position: 'bottom'}}
      }
    });
    // The counts as the text report gives them.
    var head = el('tr', null, [el('th', {text: 'kind'})].concat(CLASSES.map(function (c) {
      return el('th', {text: c});
    })));
    var rows = kinds.map(function (k) {
      return el('tr', null, [el('td', {text: k})].concat(CLASSES.map(function (c) {
        var n = R.summary[k][c];
        var cls = n === 0 ? 'zero' : c === 'equal' ? 'ok' : (c === 'within_tol' || c === 'unsupported') ? '' : 'bad';
        return el('td', {class: 'num ' + cls, text: String(n)});
      })));
    });
    s.appendChild(el('table', {class: 'counts'}, [el('thead', null, [head]), el('tbody', null, rows)]));
  }

  // ---- 5. heat map -----------------------------------------------------------------------------
  var heatmapApi = null;
  function hexRgb(hex) {
    var c = d3.rgb(hex);
    return [c.r, c.g, c.b];
  }
  // Per cell: its class (ABSENT, NONFINITE or a CLASSES index) and its verdict: 0 none (not
  // a divergence, or no explanation), 1 noise, 2 bug; `rule` indexes grid.rules (-1: none).
  var VERDICT_NONE = 0, VERDICT_NOISE = 1, VERDICT_BUG = 2;
  function decodeCells(G) {
    var packed = decode(G.code, Uint8Array), n = packed.length;
    var cls = new Uint8Array(n), verdict = new Uint8Array(n), rule = new Int8Array(n);
    var bugRule = G.rules.map(function (r) { return r.category === 'bug'; });
    for (var i = 0; i < n; ++i) {
      var c = packed[i];
      if (c === ABSENT) { cls[i] = ABSENT; rule[i] = -1; continue; }
      cls[i] = c & 7;
      var w = (c >> 3) - 1;
      rule[i] = w;
      verdict[i] = w < 0 ? VERDICT_NONE : bugRule[w] ? VERDICT_BUG : VERDICT_NOISE;
    }
    return {cls: cls, verdict: verdict, rule: rule};
  }
  function drawHeatmap() {
    var G = DATA.grid, nrows = G.rows.length, ncols = G.columns;
    var s = section('heatmap', 'Heat map: the verdict on each series at each step');
    if (!nrows || !ncols) { s.appendChild(el('p', {text: 'No pair compared.'})); return; }
    var cells = decodeCells(G), code = cells.cls, verdict = cells.verdict, ruleOf = cells.rule;
    var rel = decode(G.rel, Float32Array);
    var base = decode(G.base, Float32Array), test = decode(G.test, Float32Array);
    var series = G.rows.map(function (i) { return R.series[i]; });

    // Colour: the relative difference on a log scale from 1e-16 (float64's epsilon) to 1, the
    // same in every report (fp32 summation order, ~1e-7, sits mid-scale), widened only where
    // a difference falls outside it.
    var lo = 1e-16, hi = 1;
    for (var i = 0; i < rel.length; ++i) {
      var c = code[i];
      if ((c === 1 || c === 2) && rel[i] > 0 && isFinite(rel[i])) { lo = Math.min(lo, rel[i]); hi = Math.max(hi, rel[i]); }
    }
    // Two colourings: the verdict (noise in blues, bugs in reds, the magnitude as intensity),
    // or the magnitude alone (yellow to red).
    var color = d3.scaleSequentialLog(d3.interpolateYlOrRd).domain([lo, hi]).clamp(true);
    var noiseColor = d3.scaleSequentialLog(function (t) { return d3.interpolateBlues(0.2 + 0.65 * t); })
      .domain([lo, hi]).clamp(true);
    var bugColor = d3.scaleSequentialLog(function (t) { return d3.interpolateReds(0.4 + 0.6 * t); })
      .domain([lo, hi]).clamp(true);
    var zeroDiff = hexRgb('#fdf0b0');  // a hash differs while the norm is equal (rel 0)
    var fixed = {};
    Object.keys(CELL_COLOR).forEach(function (k) { fixed[k] = hexRgb(CELL_COLOR[k]); });
    // A scale as a 256-entry table: a million cells need no colour interpolation each.
    var logLo = Math.log10(lo), lutStep = 255 / (Math.log10(hi) - logLo);
    function table(scale) {
      var lut = [];
      for (var q = 0; q < 256; ++q) lut.push(hexRgb(scale(Math.pow(10, logLo + q / lutStep))));
      return lut;
    }
    var lut = table(color), noiseLut = table(noiseColor), bugLut = table(bugColor);
    function shade(l, r) {  // rel 0 (a hash moved, the norm did not): the scale's lightest
      if (!(r > 0)) return l[0];
      return l[Math.max(0, Math.min(255, Math.round((Math.log10(isFinite(r) ? r : hi) - logLo) * lutStep)))];
    }
    // The colours both colourings give: no record, NaN/Inf, equal, `none` on one side,
    // unsupported; null for the classes each colours its own way.
    function fixedRgb(c) {
      if (c === ABSENT) return fixed.absent;
      if (c === NONFINITE) return fixed.nonfinite;
      if (c === 0) return fixed.equal;
      if (c === 5) return fixed.none_one_side;
      if (c === 6) return fixed.unsupported;
      return null;
    }
    function magnitudeRgb(k) {
      var c = code[k], f = fixedRgb(c);
      if (f) return f;
      if (c === 3) return fixed.only_base;
      if (c === 4) return fixed.only_test;
      if (!(rel[k] > 0)) return zeroDiff;
      return shade(lut, rel[k]);
    }
    // Verdict: `none` on one side and NaN/Inf keep their colours; a record in one run only is
    // a bug (missing_record) at full intensity; within tolerance is accepted, so noise; a
    // difference without explanation is not noise, so a bug.
    function verdictRgb(k) {
      var c = code[k], f = fixedRgb(c);
      if (f) return f;
      if (c === 3 || c === 4) return bugLut[255];
      if (c === 1 || verdict[k] === VERDICT_NOISE) return shade(noiseLut, rel[k]);
      return shade(bugLut, rel[k]);
    }

    // Controls and legend.
    var kindsPresent = [];
    series.forEach(function (x) { if (kindsPresent.indexOf(x.kind) < 0) kindsPresent.push(x.kind); });
    var kindSel = el('select', {id: 'heatmap-kind'}, [el('option', {value: '', text: 'all kinds'})].concat(
      kindsPresent.map(function (k) { return el('option', {value: k, text: k}); })));
    var onlyDiv = el('input', {type: 'checkbox', id: 'heatmap-divergent'});
    var zoomSel = el('select', {id: 'heatmap-zoom'}, [1, 2, 4, 8].map(function (z) {
      return el('option', {value: String(z), text: 'zoom x' + z});
    }));
    var colourSel = el('select', {id: 'heatmap-colour'}, [
      el('option', {value: 'verdict', text: 'colour: verdict (bug, noise, equal)'}),
      el('option', {value: 'magnitude', text: 'colour: magnitude only'})]);
    var headline = G.first_unexplained && !(R.options && R.options.strict) ? G.first_unexplained : G.first_divergence;
    var jump = el('button', {type: 'button', text: headline === G.first_divergence ? 'first divergence'
                                                                               : 'first unexplained divergence'});
    s.appendChild(el('div', {class: 'controls'}, [colourSel, kindSel,
      el('label', null, [onlyDiv, ' mismatching series only']), zoomSel, headline ? jump : null]));
    var legendBox = el('div', {class: 'legend-box'});
    s.appendChild(legendBox);
    function drawLegendFor() {
      legendBox.textContent = '';
      legendBox.appendChild(colourSel.value === 'magnitude' ? drawLegend([['relative norm difference (log)', color]], lo, hi, true)
        : drawLegend([['noise', noiseColor], ['bug', bugColor]], lo, hi, false));
    }
    drawLegendFor();
    if (G.steps_per_column > 1)
      s.appendChild(el('p', {class: 'note', text: 'Each column spans ' + G.steps_per_column +
        ' steps and shows its most severe pair (NaN/Inf, none, one run only, different, within tolerance; ' +
        'a bug before noise).'}));

    var labelW = 260, axisH = 34;
    var wrap = el('div', {class: 'hm-wrap'});
    var labels = el('canvas', {class: 'hm-labels'});
    var axis = el('canvas', {class: 'hm-axis'});
    var scroller = el('div', {class: 'hm-scroll'});
    var spacer = el('div', {class: 'hm-spacer'});
    var view = el('canvas', {id: 'heatmap-canvas', class: 'hm-view', 'data-rows': String(nrows),
                             'data-columns': String(ncols)});
    scroller.appendChild(view);
    scroller.appendChild(spacer);
    var tip = el('div', {class: 'hm-tip', hidden: ''});
    wrap.appendChild(el('div', {class: 'hm-corner'}));
    wrap.appendChild(axis);
    wrap.appendChild(labels);
    wrap.appendChild(scroller);
    s.appendChild(wrap);
    s.appendChild(tip);
    s.appendChild(el('p', {class: 'note', text: 'Rows: parameters in model order (grad, then its mb_grads), forward ' +
      'records by kind, name and microbatch, output_grad, scalars. Hover a cell for its figures; click it to plot the series below.'}));

    var shown = [];     // visible row -> index into series / code rows
    var image = null;   // offscreen canvas: one pixel per (visible row, column)
    var cw = 1, ch = 1;
    // The headline's cell is ringed; the first divergence, when it is another pair, dashed.
    var fdRow = headline ? headline.row : -1;
    var fdCol = headline ? headline.column : -1;
    var other = G.first_divergence && headline !== G.first_divergence ? G.first_divergence : null;
    var otherRow = other ? other.row : -1, otherCol = other ? other.column : -1;

    function mismatching(x) { return x.exact_matches !== x.paired_steps || x.base_steps !== x.test_steps; }
    function build() {
      var kind = kindSel.value, only = onlyDiv.checked;
      shown = [];
      for (var r = 0; r < nrows; ++r) {
        var x = series[r];
        if ((!kind || x.kind === kind) && (!only || mismatching(x))) shown.push(r);
      }
      image = document.createElement('canvas');
      image.width = ncols;
      image.height = Math.max(1, shown.length);
      var ctx = image.getContext('2d');
      var img = ctx.createImageData(ncols, Math.max(1, shown.length)), px = img.data;
      var drawn = 0, divergent = 0, bugs = 0, noise = 0;
      var rgbOf = colourSel.value === 'magnitude' ? magnitudeRgb : verdictRgb;
      for (var y = 0; y < shown.length; ++y) {
        var row = shown[y] * ncols;
        for (var x2 = 0; x2 < ncols; ++x2) {
          var k = row + x2, rgb = rgbOf(k), o = (y * ncols + x2) * 4;
          px[o] = rgb[0]; px[o + 1] = rgb[1]; px[o + 2] = rgb[2]; px[o + 3] = 255;
          if (code[k] !== ABSENT) ++drawn;
          if (code[k] >= 2 && code[k] <= 5 || code[k] === NONFINITE) ++divergent;
          if (verdict[k] === VERDICT_BUG) ++bugs;
          else if (verdict[k] === VERDICT_NOISE) ++noise;
        }
      }
      ctx.putImageData(img, 0, 0);
      // Countable markers for tests and tools: a canvas has no DOM cells.
      view.setAttribute('data-colour', colourSel.value);
      view.setAttribute('data-rows-shown', String(shown.length));
      view.setAttribute('data-cells-drawn', String(drawn));
      view.setAttribute('data-cells-divergent', String(divergent));
      view.setAttribute('data-cells-bug', String(bugs));
      view.setAttribute('data-cells-noise', String(noise));
      layout();
    }
    function layout() {
      var zoom = +zoomSel.value;
      var avail = Math.max(200, s.clientWidth - labelW - 24);
      cw = Math.max(1, Math.min(160, Math.floor(avail / ncols))) * zoom;
      ch = Math.max(1, Math.min(14, Math.floor(720 / Math.max(1, shown.length)))) * zoom;
      var fullW = ncols * cw, fullH = shown.length * ch;
      var vw = Math.min(fullW, avail), vh = Math.min(fullH, 760);
      spacer.style.width = fullW + 'px';
      spacer.style.height = fullH + 'px';
      scroller.style.width = vw + (fullH > vh ? 16 : 0) + 'px';
      scroller.style.height = vh + (fullW > vw ? 16 : 0) + 'px';
      view.width = vw; view.height = vh;
      view.style.width = vw + 'px'; view.style.height = vh + 'px';
      labels.width = labelW; labels.height = vh;
      axis.width = vw; axis.height = axisH;
      paint();
    }
    function paint() {
      var sx = scroller.scrollLeft, sy = scroller.scrollTop;
      var vctx = view.getContext('2d');
      vctx.imageSmoothingEnabled = false;
      vctx.clearRect(0, 0, view.width, view.height);
      var c0 = Math.floor(sx / cw), r0 = Math.floor(sy / ch);
      var nc = Math.min(ncols - c0, Math.ceil(view.width / cw) + 1);
      var nr = Math.min(shown.length - r0, Math.ceil(view.height / ch) + 1);
      if (nc > 0 && nr > 0)
        vctx.drawImage(image, c0, r0, nc, nr, c0 * cw - sx, r0 * ch - sy, nc * cw, nr * ch);
      ringCell(vctx, otherRow, otherCol, sx, sy, true);
      ringCell(vctx, fdRow, fdCol, sx, sy, false);
      paintLabels(sy, r0, nr);
      paintAxis(sx, c0, nc);
    }
    // A ring round a cell, with crosshairs when cells are small; dashed for the first
    // divergence beside the headline.
    function ringCell(vctx, row, col, sx, sy, dashed) {
      var y = shown.indexOf(row);
      if (y >= 0 && col >= 0) {
        var x0 = col * cw - sx, y0 = y * ch - sy;
        vctx.save();
        if (dashed) {
          vctx.setLineDash([3, 2]); vctx.strokeStyle = '#000'; vctx.lineWidth = 1.5;
          vctx.strokeRect(x0 - 3, y0 - 3, cw + 6, ch + 6);
          vctx.restore();
          return;
        }
        vctx.strokeStyle = '#000'; vctx.lineWidth = 2;
        if (cw < 6 || ch < 6) {
          vctx.setLineDash([4, 3]); vctx.lineWidth = 1;
          vctx.beginPath();
          vctx.moveTo(x0 + cw / 2, 0); vctx.lineTo(x0 + cw / 2, view.height);
          vctx.moveTo(0, y0 + ch / 2); vctx.lineTo(view.width, y0 + ch / 2);
          vctx.stroke();
          vctx.setLineDash([]); vctx.lineWidth = 2;
        }
        vctx.strokeRect(x0 - 3, y0 - 3, cw + 6, ch + 6);
        vctx.strokeStyle = '#fff'; vctx.lineWidth = 1;
        vctx.strokeRect(x0 - 1, y0 - 1, cw + 2, ch + 2);
        vctx.restore();
      }
    }
    function paintLabels(sy, r0, nr) {
      var ctx = labels.getContext('2d');
      ctx.clearRect(0, 0, labels.width, labels.height);
      ctx.font = Math.min(12, Math.max(9, ch - 2)) + 'px sans-serif';
      ctx.textBaseline = 'middle';
      var kindColor = d3.scaleOrdinal(d3.schemeTableau10).domain(KINDS);
      var every = ch >= 9 ? 1 : Math.ceil(12 / ch);  // a label every `every` rows when rows are thin
      for (var y = r0; y < r0 + nr; ++y) {
        var x = series[shown[y]], top = y * ch - sy;
        ctx.fillStyle = kindColor(x.kind);
        ctx.fillRect(labelW - 6, top, 6, ch);
        if (y % every) continue;
        ctx.fillStyle = shown[y] === fdRow ? '#d62728' : '#222';
        var text = seriesTitle(x);
        while (text.length > 4 && ctx.measureText(text).width > labelW - 12) text = '…' + text.slice(2);
        ctx.fillText(text, 2, top + ch / 2);
      }
    }
    function paintAxis(sx, c0, nc) {
      var ctx = axis.getContext('2d');
      ctx.clearRect(0, 0, axis.width, axis.height);
      ctx.font = '11px sans-serif';
      ctx.fillStyle = '#222';
      ctx.textBaseline = 'bottom';
      var every = Math.max(1, Math.ceil(60 / cw));
      for (var x = c0; x < c0 + nc; ++x) {
        if (x % every) continue;
        var left = x * cw - sx;
        ctx.fillRect(left, axisH - 5, 1, 5);
        ctx.fillText(String(G.first_step[x]), left + 2, axisH - 6);
      }
      ctx.fillText('step', 2, 12);
    }
    function cellAt(ev) {
      var rect = view.getBoundingClientRect();
      var x = Math.floor((ev.clientX - rect.left + scroller.scrollLeft) / cw);
      var y = Math.floor((ev.clientY - rect.top + scroller.scrollTop) / ch);
      if (x < 0 || x >= ncols || y < 0 || y >= shown.length) return null;
      return {row: shown[y], col: x};
    }
    function describe(row, col) {
      var k = row * ncols + col, c = code[k], x = series[row];
      var steps = G.first_step[col] === G.last_step[col] ? 'step ' + G.first_step[col]
        : 'steps ' + G.first_step[col] + '..' + G.last_step[col];
      var cls = c === ABSENT ? 'no record' : c === NONFINITE ? 'NaN/Inf on a side' : CLASSES[c];
      var lines = [seriesTitle(x), steps + ': ' + cls];
      if (c !== ABSENT) {
        var what = x.kind === 'scalar' ? 'value' : 'norm';
        lines.push('base ' + what + ' ' + (isNaN(base[k]) && c !== NONFINITE ? '-' : short(base[k])) +
                   ',  test ' + what + ' ' + (isNaN(test[k]) && c !== NONFINITE ? '-' : short(test[k])));
        if (c !== 0) lines.push('relative difference ' + (rel[k] === Infinity ? 'inf' : expShort(rel[k], 3)));
        if (ruleOf[k] >= 0) {
          var why = G.rules[ruleOf[k]];
          lines.push(why.category + ': ' + (why.rule || 'another rule'));
        } else if (c === 2 || c === 3 || c === 4 || c === 5) {
          lines.push('no explanation');
        }
      }
      if (row === fdRow && col === fdCol)
        lines.push(headline === G.first_divergence ? 'FIRST DIVERGENCE' : 'FIRST UNEXPLAINED DIVERGENCE');
      if (row === otherRow && col === otherCol) lines.push('FIRST DIVERGENCE');
      return lines;
    }
    view.addEventListener('mousemove', function (ev) {
      var cell = cellAt(ev);
      if (!cell) { tip.hidden = true; return; }
      tip.textContent = describe(cell.row, cell.col).join('\n');
      tip.hidden = false;
      var box = s.getBoundingClientRect();
      tip.style.left = (ev.clientX - box.left + 14) + 'px';
      tip.style.top = (ev.clientY - box.top + 14) + 'px';
    });
    view.addEventListener('mouseleave', function () { tip.hidden = true; });
    view.addEventListener('click', function (ev) {
      var cell = cellAt(ev);
      if (cell) plotGridSeries(cell.row);
    });
    scroller.addEventListener('scroll', function () { window.requestAnimationFrame(paint); });
    kindSel.addEventListener('change', build);
    colourSel.addEventListener('change', function () { drawLegendFor(); build(); });
    onlyDiv.addEventListener('change', build);
    zoomSel.addEventListener('change', layout);
    window.addEventListener('resize', layout);
    function reveal() {
      if (shown.indexOf(fdRow) < 0) { kindSel.value = ''; onlyDiv.checked = false; build(); }
      var y = shown.indexOf(fdRow);
      scroller.scrollLeft = Math.max(0, fdCol * cw - view.width / 2);
      scroller.scrollTop = Math.max(0, y * ch - view.height / 2);
      s.scrollIntoView();
      paint();
    }
    jump.addEventListener('click', reveal);
    build();
    if (fdRow >= 0) {  // start with the first divergence in view
      var y = shown.indexOf(fdRow);
      scroller.scrollTop = Math.max(0, y * ch - view.height / 2);
      scroller.scrollLeft = Math.max(0, fdCol * cw - view.width / 2);
      paint();
    }
    heatmapApi = {reveal: reveal};

    // The series behind a row, from the grid (float32: 7 significant digits).
    function plotGridSeries(row) {
      var steps = [], b = [], t = [];
      for (var x = 0; x < ncols; ++x) {
        var k = row * ncols + x;
        if (code[k] === ABSENT) continue;
        steps.push(G.first_step[x]);
        b.push(isNaN(base[k]) ? null : base[k]);
        t.push(isNaN(test[k]) ? null : test[k]);
      }
      var box = document.getElementById('selected-curve');
      box.textContent = '';
      box.appendChild(curveCard(series[row], {steps: steps, base: b, test: t},
                                'from the heat map (float32, 7 significant digits)'));
      box.scrollIntoView();
    }
  }
  // The colour scales (one bar each, over the same log axis of the relative difference) and
  // the fixed colours of the mode.
  function drawLegend(scales, lo, hi, magnitude) {
    var w = 320, barH = 12, h = scales.length * (barH + 2) + 30;
    var svg = d3.create('svg').attr('width', w + 90).attr('height', h).attr('class', 'legend-scale');
    var defs = svg.append('defs');
    scales.forEach(function (sc, i) {
      var id = 'legend-gradient-' + (magnitude ? 'm' : 'v') + i;
      var grad = defs.append('linearGradient').attr('id', id);
      d3.range(0, 1.0001, 0.1).forEach(function (t) {
        grad.append('stop').attr('offset', t)
          .attr('stop-color', sc[1](Math.pow(10, Math.log10(lo) + t * (Math.log10(hi) - Math.log10(lo)))));
      });
      var y = 4 + i * (barH + 2);
      svg.append('rect').attr('x', 60).attr('y', y).attr('width', w).attr('height', barH).attr('fill', 'url(#' + id + ')');
      if (scales.length > 1)
        svg.append('text').attr('x', 54).attr('y', y + barH - 2).attr('text-anchor', 'end').text(sc[0]);
    });
    var x = d3.scaleLog().domain([lo, hi]).range([60, 60 + w]);
    svg.append('g').attr('transform', 'translate(0,' + (4 + scales.length * (barH + 2)) + ')').call(
      d3.axisBottom(x).tickValues(d3.range(Math.ceil(Math.log10(lo)), Math.floor(Math.log10(hi)) + 1, 4)
        .map(function (e) { return Math.pow(10, e); })).tickFormat(d3.format('.0e')));
    var swatches = magnitude
      ? [['bitwise equal', CELL_COLOR.equal], ['hash differs, norm equal', '#fdf0b0'],
         ['none on one side', CELL_COLOR.none_one_side], ['base only', CELL_COLOR.only_base],
         ['test only', CELL_COLOR.only_test], ['NaN/Inf', CELL_COLOR.nonfinite],
         ['unsupported', CELL_COLOR.unsupported], ['no record', CELL_COLOR.absent]]
      : [['bitwise equal', CELL_COLOR.equal], ['none on one side', CELL_COLOR.none_one_side],
         ['NaN/Inf', CELL_COLOR.nonfinite], ['unsupported', CELL_COLOR.unsupported],
         ['no record', CELL_COLOR.absent]];
    var title = magnitude ? 'relative norm difference (log):'
      : 'verdict, relative norm difference (log) as intensity:';
    var legend = el('div', {class: 'legend', 'data-colour': magnitude ? 'magnitude' : 'verdict'}, [
      el('span', {class: 'legend-title', text: title}), svg.node()]);
    swatches.forEach(function (sw) {
      legend.appendChild(el('span', {class: 'swatch'}, [el('i', {style: 'background:' + sw[1]}), sw[0]]));
    });
    if (!magnitude)
      legend.appendChild(el('span', {class: 'note', text: 'noise: explained as noise, or within --rtol/--atol; ' +
        'bug: a bug-class explanation, a difference without one, a record in one run only. Hover names the rule.'}));
    return legend;
  }

  // ---- 6. curves ---------------------------------------------------------------------------
  function figures(st) {
    var rng = st.kind === 'rng';
    var items = [['paired steps', st.paired_steps], ['exact matches', st.exact_matches],
                 ['first divergent step', st.first_divergent_step]];
    if (!rng)
      items = items.concat([['MAE', fmtShort(st.mae)], ['RMSE', fmtShort(st.rmse)],
        ['max |d|', st.max_abs_diff === null ? '-' : fmtShort(st.max_abs_diff) + ' @ step ' + st.max_abs_diff_step],
        ['final d', fmtShort(st.final_diff)]]);
    if (st.nonfinite_mismatch_steps) items.push(['NaN/Inf on one side', st.nonfinite_mismatch_steps + ' steps']);
    if (st.base_steps !== st.test_steps) items.push(['steps with a value', 'base ' + st.base_steps + ', test ' + st.test_steps]);
    return el('dl', {class: 'figures'}, [].concat.apply([], items.map(function (it) {
      return [el('dt', {text: it[0]}), el('dd', {text: it[1] === null ? '-' : String(it[1])})];
    })));
  }
  function asNumber(v) {
    if (v === null) return null;
    if (typeof v === 'string') return v === 'nan' ? NaN : v === 'inf' ? Infinity : v === '-inf' ? -Infinity : +v;
    return v;
  }
  var chartCount = 0;
  function curveCard(st, c, source) {
    var card = el('div', {class: 'curve', 'data-series': seriesTitle(st)});
    card.appendChild(el('h3', {class: st.first_divergent_step !== null ? 'bad' : 'ok', text: seriesTitle(st)}));
    if (source) card.appendChild(el('p', {class: 'note', text: source}));
    var body = el('div', {class: 'curve-body'});
    card.appendChild(body);
    body.appendChild(figures(st));
    var what = st.kind === 'scalar' ? 'value' : 'norm';
    if (c.steps.length === 1) {  // one point is no curve: its figures say it all
      card.setAttribute('data-single-step', String(c.steps[0]));
      body.appendChild(el('p', {class: 'note single-step', text: 'One step only (step ' + c.steps[0] + '): base ' +
        what + ' ' + num(c.base[0]) + ', test ' + what + ' ' + num(c.test[0]) +
        '. A single point is not drawn as a curve.'}));
      return card;
    }
    var b = c.base.map(asNumber), t = c.test.map(asNumber);
    var vals = [], diffs = [], zeros = 0;
    for (var i = 0; i < c.steps.length; ++i) {
      var x = c.steps[i];
      vals.push({x: x, b: b[i], t: t[i]});
      if (b[i] === null || t[i] === null) continue;
      var d = t[i] - b[i];
      if (d === 0 || (isNaN(b[i]) && isNaN(t[i]))) { ++zeros; continue; }
      diffs.push({x: x, y: isFinite(d) ? Math.abs(d) : null});
    }
    var many = c.steps.length > 200;
    function chart(canvas, datasets, yScale, yTitle) {
      ++chartCount;
      return new Chart(canvas, {
        type: 'line',
        data: {datasets: datasets},
        options: {
          animation: false, parsing: false, normalized: true, maintainAspectRatio: false,
          spanGaps: false,
          elements: {point: {radius: many ? 0 : 2}, line: {borderWidth: 1.5}},
          interaction: {mode: 'nearest', intersect: false, axis: 'x'},
          scales: {x: {type: 'linear', title: {display: true, text: 'step'}, ticks: {precision: 0}},
                   y: Object.assign({title: {display: true, text: yTitle}}, yScale)},
          plugins: {legend: {position: 'bottom'}, decimation: {enabled: many, algorithm: 'min-max'},
                    tooltip: {callbacks: {label: function (ctx) {
                      return ctx.dataset.label + ': ' + String(ctx.raw.y);
                    }}}}
        }
      });
    }
    var c1 = el('canvas'), c2 = el('canvas');
    body.appendChild(el('div', {class: 'chart-box small'}, [c1]));
    body.appendChild(el('div', {class: 'chart-box small'}, [c2]));
    chart(c1, [
      {label: 'base ' + what, borderColor: '#1f77b4', backgroundColor: '#1f77b4',
       data: vals.map(function (p) { return {x: p.x, y: p.b === null || !isFinite(p.b) ? null : p.b}; })},
      {label: 'test ' + what, borderColor: '#d62728', backgroundColor: '#d62728', borderDash: [5, 3],
       data: vals.map(function (p) { return {x: p.x, y: p.t === null || !isFinite(p.t) ? null : p.t}; })}
    ], {type: 'linear'}, what);
    if (diffs.length) {
      chart(c2, [{label: '|d| = |test - base|', borderColor: '#7b4ea3', backgroundColor: '#7b4ea3', data: diffs}],
            {type: 'logarithmic'}, '|d| (log)');
    } else {
      c2.parentNode.replaceWith(el('p', {class: 'note', text: 'd = 0 at every paired step: nothing for a log axis.'}));
    }
    if (zeros && diffs.length)
      card.appendChild(el('p', {class: 'note', text: zeros + ' step(s) with d = 0 (left out of the log axis).'}));
    return card;
  }
  function drawCurves() {
    var s = section('curves', 'Curves: paired statistics (d = test - base)');
    s.appendChild(el('div', {id: 'selected-curve'}));
    if (!DATA.curves.length) s.appendChild(el('p', {text: 'No series to plot.'}));
    var grid = el('div', {class: 'curves'});
    s.appendChild(grid);
    DATA.curves.forEach(function (c) {
      guarded(function () { grid.appendChild(curveCard(R.series[c.series], c, null)); });
    });
    s.setAttribute('data-curves', String(DATA.curves.length));
    var single = DATA.curves.filter(function (c) { return c.steps.length === 1; }).length;
    if (single)
      s.insertBefore(el('p', {class: 'note', text: single === DATA.curves.length
        ? 'Every series has one step only: no curves, the figures are below each title and in the tables.'
        : single + ' series with one step only are shown as figures, not curves.'}), grid);
  }

  // ---- 7. tables -----------------------------------------------------------------------------
  // A table whose column headers sort it (numbers numerically; '-' last).
  function sortableTable(id, columns, rows) {
    var thead = el('tr');
    var tbody = el('tbody');
    var table = el('table', {id: id, class: 'sortable', 'data-rows': String(rows.length)},
                   [el('thead', null, [thead]), tbody]);
    var order = {col: -1, dir: 1};
    function fill() {
      tbody.textContent = '';
      rows.forEach(function (r) {
        tbody.appendChild(el('tr', null, r.map(function (v, i) {
          return el('td', {class: columns[i].num ? 'num' : '', text: v === null || v === undefined ? '-' : String(v)});
        })));
      });
    }
    function key(v) {
      if (v === null || v === undefined || v === '-') return null;
      var n = asNumber(v);
      return typeof n === 'number' && !isNaN(n) ? n : String(v);
    }
    columns.forEach(function (c, i) {
      var th = el('th', {text: c.title, title: 'sort', tabindex: '0'});
      th.addEventListener('click', function () {
        order.dir = order.col === i ? -order.dir : (c.num ? -1 : 1);
        order.col = i;
        rows.sort(function (a, b) {
          var x = key(a[i]), y = key(b[i]);
          if (x === y) return 0;
          if (x === null) return 1;
          if (y === null) return -1;
          return (x < y ? -1 : 1) * order.dir;
        });
        Array.prototype.forEach.call(thead.children, function (h, j) {
          h.setAttribute('aria-sort', j === i ? (order.dir > 0 ? 'ascending' : 'descending') : 'none');
        });
        fill();
      });
      thead.appendChild(th);
    });
    fill();
    return table;
  }
  function norm(side) { return side === null ? null : side.norm !== undefined ? side.norm : side.value; }
  function drawTables() {
    var s = section('tables', 'Tables');
    s.appendChild(el('h3', {text: 'Top ' + R.top.length + ' differences (relative norm/value difference)'}));
    s.appendChild(sortableTable('top-table', [
      {title: 'relative difference', num: true}, {title: 'step', num: true}, {title: 'phase'},
      {title: 'kind'}, {title: 'name'}, {title: 'mb', num: true}, {title: 'class'},
      {title: 'base', num: true}, {title: 'test', num: true}, {title: 'note'}],
      R.top.map(function (p) {
        return [p.rel_diff, p.step, phaseOf(p), p.kind, p.name, p.mb, p['class'],
                fmt(norm(p.base)), fmt(norm(p.test)), p.note || ''];
      })));
    var mism = R.series.filter(function (x) {
      return x.exact_matches !== x.paired_steps || x.base_steps !== x.test_steps;
    });
    s.appendChild(el('h3', {text: 'Mismatching series (' + mism.length + ' of ' + R.series.length + ')'}));
    s.appendChild(sortableTable('series-table', [
      {title: 'kind'}, {title: 'name'}, {title: 'mb', num: true}, {title: 'paired', num: true},
      {title: 'exact', num: true}, {title: 'first divergent step', num: true}, {title: 'MAE', num: true},
      {title: 'RMSE', num: true}, {title: 'max |d|', num: true}, {title: 'at step', num: true},
      {title: 'final d', num: true}],
      mism.map(function (x) {
        return [x.kind, x.name, x.mb, x.paired_steps, x.exact_matches, x.first_divergent_step,
                x.mae, x.rmse, x.max_abs_diff, x.max_abs_diff_step, x.final_diff];
      })));
    var only = [];
    R.names_only_base.forEach(function (n) { only.push(['base', n.split(' ')[0], n.slice(n.indexOf(' ') + 1)]); });
    R.names_only_test.forEach(function (n) { only.push(['test', n.split(' ')[0], n.slice(n.indexOf(' ') + 1)]); });
    s.appendChild(el('h3', {text: 'Names in one run only (' + only.length + '; --map REGEX=REPLACEMENT aligns renamed ones)'}));
    s.appendChild(sortableTable('only-table', [{title: 'run'}, {title: 'kind'}, {title: 'name'}], only));
  }

  // ---- footer ----------------------------------------------------------------------------------
  function drawFooter() {
    var f = el('footer', {id: 'footer'});
    document.getElementById('app').appendChild(f);
    f.appendChild(el('p', {text: 'Written by numprobe diff_logs --html (' + R.schema + '). Drawn with Chart.js ' +
      Chart.version + ' (MIT) and D3 ' + d3.version + ' (BSD-3-Clause), embedded in this file; nothing is fetched.'}));
    [['license-chartjs', 'Chart.js licence (Debian copyright file)'],
     ['license-d3', 'D3 licence (Debian copyright file)']].forEach(function (l) {
      f.appendChild(el('details', null, [el('summary', {text: l[1]}),
        el('pre', {text: document.getElementById(l[0]).textContent})]));
    });
  }

  function draw() {
    var timings = [];
    function timed(fn) {
      var t = performance.now();
      guarded(fn);
      timings.push(fn.name + '=' + Math.round(performance.now() - t));
    }
    timings.push('parse=' + Math.round(parsedAt));
    drawHeader();
    // The first screen answers: the RESULT, the headline with its cause, the noise in words.
    [drawHeadline, drawFirstDivergence, drawIssues, drawSummary, drawHeatmap, drawCurves, drawTables,
     drawFooter].forEach(timed);
    document.body.setAttribute('data-timings-ms', timings.join(' '));
    document.body.setAttribute('data-charts', String(chartCount));
    // Milliseconds from navigation start to a drawn page (docs/perf.md records them).
    document.body.setAttribute('data-render-ms', String(Math.round(performance.now())));
    document.body.setAttribute('data-render', 'done');
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', function () { guarded(draw); });
  else guarded(draw);
})();
