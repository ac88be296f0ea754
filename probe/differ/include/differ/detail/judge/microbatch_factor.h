// Conventions of real trainers (docs/diff-logs.md, "Conventions"): a trainer that scales each
// microbatch's loss by a factor its step's reduction undoes (the Hugging Face Trainer multiplies
// each rank's loss by the number of processes and DDP averages; a loop divides each loss by its
// own accumulation count) makes every backward record of every microbatch the other run's times
// one factor F, while the step's gradients agree. Such a step's backward records are judged
// divided by F; the step's grads, compared as they are, must then agree within noise.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "differ/result.h"

namespace probe::differ {

class MicrobatchFactor {
 public:
  // Finds the step's factor: every microbatch that has backward records (output_grad, mb_grad,
  // backward op records) in both runs has them all equal to the base run's times one F, F the same
  // for every microbatch (within the constant factor's tolerance), |F| not within
  // kConstantFactorNotOne of one. Each microbatch's factor is read from its output gradients
  // (the loss's: the factor itself, d(F·L)/dL = F) or, without one, its first mb_grad in one
  // ratio (constant_factor).
  void start_step(const std::vector<Pair>& pairs);

  // F, or nullopt where the step has no common factor.
  std::optional<double> factor() const { return factor_; }
  // The microbatches' factors where they differ: "mb 0 x2, mb 1 x1" (empty otherwise).
  const std::string& differing() const { return differing_; }

  // Whether `p` is a backward record of a microbatch the step's factor scales, or the loss the
  // convention scales where it scales the loss itself (loss_scaled).
  bool scales(const Pair& p) const;
  // A microbatch's one-element forward output (its loss) in the step's factor to the other run's:
  // the loss computed already scaled (a loss function that divides by its own accumulation count
  // against a pipeline schedule that scales the gradients afterwards), whose gradient carries
  // the same factor into every backward record.
  bool loss_scaled(const Pair& p) const;
  // Where the microbatches' factors differ: whether `p` is a backward record in one ratio to the
  // other run's (a loss's gradient, a tensor's constant factor) other than 1. Such a pair is the
  // bug, in the words of differing_words().
  bool in_differing_step(const Pair& p) const;
  // "the loss of every microbatch is scaled, by factors that differ: mb 0 x2, mb 1 x1 ...".
  std::string differing_words(std::int64_t step) const;

  // `p` with its test side divided by F: figures (norm, l1 by |F|; min, max, mean by F, min and
  // max swapped where F < 0) and relative difference.
  Pair divided(const Pair& p) const;

  // "every backward record of every microbatch of step 3 is the base run's times 2 (test = 2 x
  // base): each loss scaled by a factor the step's reduction undoes, ...".
  std::string words(std::int64_t step) const;

 private:
  std::optional<double> factor_;
  std::string dtype_;
  std::string differing_;
};

}  // namespace probe::differ
