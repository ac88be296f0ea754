"""The wheel: `pip wheel .` builds one that installs into a fresh venv holding only torch, links
nothing a Debian dev package provides (spdlog and fmt are compiled in, xxHash is not used by what
it ships), and whose `import numprobe`, `diff_logs` and `numprobe_bisect` work there."""
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest
import torch

ROOT = os.environ.get("NUMPROBE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))

# The shared libraries a wheel's ELF files may name: the C and C++ runtimes every torch needs,
# torch's own (found through the RUNPATH $ORIGIN/../torch/lib) and the package's library.
ALLOWED_NEEDED = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2",
                  "libpthread.so.0", "libdl.so.2", "librt.so.1", "libnumprobe.so", "libc10.so",
                  "libtorch.so", "libtorch_cpu.so", "libtorch_python.so", "libgomp.so.1"}

RUN_TWICE = textwrap.dedent("""
    import sys, torch, numprobe
    def run(directory, scale):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        probe = numprobe.Probe(directory, on_error="throw")
        probe.watch(model)
        probe.watch_optimizer(optimizer)
        for step in range(2):
            probe.begin_step(step)
            out = probe.forward(0, model, torch.ones(3, 4))
            probe.backward(0, (out * scale).sum())
            optimizer.step()
            probe.end_step()
            optimizer.zero_grad()
    run(sys.argv[1] + "/a", 1.0)
    run(sys.argv[1] + "/b", 1.0)
    run(sys.argv[1] + "/c", 1.5)
    same = numprobe.diff(sys.argv[1] + "/a", sys.argv[1] + "/b")
    other = numprobe.diff(sys.argv[1] + "/a", sys.argv[1] + "/c")
    print("exits", same["exit_code"], other["exit_code"], numprobe.__file__)
""")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """Builds the wheel as a user would, reusing the package's build tree (build-python/, which
    scripts/test.sh has just built) so that only the packaging runs."""
    out = tmp_path_factory.mktemp("wheel")
    launcher = ["-Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                    f"-Cbuild-dir={ROOT}/build-python", "-Ccmake.build-type=RelWithDebInfo",
                    "-Ccmake.define.NUMPROBE_WERROR=ON", "-Cinstall.strip=true", *launcher, "-w", str(out), ROOT],
                   check=True)
    wheels = list(out.glob("numprobe-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory, wheel):
    """A venv with nothing but this torch and the wheel (and what torch itself depends on)."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, f"torch=={torch.__version__}"], check=True)
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True)
    return venv


def _venv_env(venv):
    """Only the venv and the system's own directories on PATH, so no tool of the build is found."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "LD_"))}
    env["PATH"] = f"{venv}/bin:/usr/bin:/bin"
    return env


def _needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return {line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line}


def test_the_wheel_holds_the_package_and_both_tools_and_one_copy_of_the_library(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "numprobe/__init__.py" in names
    assert [n for n in names if n.endswith("/scripts/diff_logs")]
    assert [n for n in names if n.endswith("/scripts/numprobe_bisect")]
    assert [n for n in names if n.startswith("numprobe/libnumprobe.so")] == ["numprobe/libnumprobe.so"]


def test_what_the_wheel_ships_links_only_the_c_runtime_torch_and_itself(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path)
    elves = [p for p in tmp_path.rglob("*") if p.is_file() and p.read_bytes()[:4] == b"\x7fELF"]
    assert len(elves) == 4, elves  # _C, libnumprobe.so, diff_logs, numprobe_bisect
    for elf in elves:
        assert _needed(str(elf)) <= ALLOWED_NEEDED, (elf.name, _needed(str(elf)) - ALLOWED_NEEDED)


def test_in_a_venv_with_only_torch_the_probe_records_and_diff_logs_compares(fresh_venv, tmp_path):
    script = tmp_path / "run_twice.py"
    script.write_text(RUN_TWICE)
    done = subprocess.run([str(fresh_venv / "bin" / "python"), str(script), str(tmp_path)],
                          capture_output=True, text=True, env=_venv_env(fresh_venv), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    exits, same, other, where = done.stdout.split()[-4:]
    assert (same, other) == ("0", "1"), done.stdout
    assert where.startswith(str(fresh_venv)), where  # the wheel's package, not the source tree's


def test_in_a_venv_with_only_torch_both_tools_run(fresh_venv):
    env = _venv_env(fresh_venv)
    for tool in ("diff_logs", "numprobe_bisect"):
        assert shutil.which(tool, path=env["PATH"]) == str(fresh_venv / "bin" / tool)
        done = subprocess.run([tool, "--help"], capture_output=True, text=True, env=env)
        assert done.returncode == 0, (tool, done.stderr)
        assert done.stdout.startswith(f"{tool}: "), done.stdout[:200]
