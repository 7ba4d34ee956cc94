"""Build script of the `trickle` Python package (a torch C++ extension over the header-only library).

Install from the repository root with the torch you will train with already installed:

    pip install --no-build-isolation ./python

The extension is compiled against that torch (its headers and libraries), with -std=c++20,
and the trickle headers found by `trickle_include_dir()` below. Where torch has CUDA and
nvcc is found (`find_nvcc()`), it is a CUDA build: the engines over CUDA parameters are
compiled by nvcc (csrc/cuda_*.cu) for the architectures of `cuda_arch_list()`, and CUDA
tensors run on trickle's kernels; elsewhere a CPU-only build. $TRICKLE_CUDA=0 forces the
CPU-only build, $TRICKLE_CUDA=1 requires CUDA.

Nothing is written into the source tree, so a read-only checkout installs: the build
directory (objects, build/lib, bdist) and the egg-info live in `build_dir()` below,
$TRICKLE_BUILD_DIR or a per-user cache directory.
"""

import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent


def trickle_include_dir() -> str:
    """The directory holding trickle/trickle.hpp.

    In order: $TRICKLE_INCLUDE_DIR; python/include (a copy shipped next to this file);
    the repository's include/ one level above this file (the usual in-tree build).
    """
    candidates = []
    env = os.environ.get("TRICKLE_INCLUDE_DIR")
    if env:
        candidates.append(Path(env).expanduser().resolve())
    candidates += [HERE / "include", HERE.parent / "include"]
    for c in candidates:
        if (c / "trickle" / "trickle.hpp").is_file():
            return str(c)
    sys.exit(
        "trickle: cannot find the trickle headers (trickle/trickle.hpp); looked in "
        + ", ".join(str(c) for c in candidates)
        + ". Build from a checkout of the repository (pip install --no-build-isolation ./python), "
        "or set TRICKLE_INCLUDE_DIR to the repository's include/ directory."
    )


def build_dir(torch_version: str, torch_file: str) -> str:
    """Where setuptools builds (build_base: objects, build/lib, bdist) and writes the egg-info.

    $TRICKLE_BUILD_DIR when set; otherwise $XDG_CACHE_HOME/trickle-build/<key> (default
    ~/.cache), the key a hash of this source directory, the Python version and the torch
    build, so that rebuilds of the same checkout are incremental (ninja) and different
    checkouts or torches never share objects; a directory under the system's temporary
    directory when the cache is not writable. A `--build-base` given to setuptools wins.
    """
    env = os.environ.get("TRICKLE_BUILD_DIR")
    if env:
        candidates = [Path(env).expanduser().resolve()]
    else:
        key = hashlib.sha256(f"{HERE}|{sys.version}|{torch_version}|{torch_file}".encode()).hexdigest()[:16]
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        uid = os.getuid() if hasattr(os, "getuid") else "user"
        candidates = [cache / "trickle-build" / key, Path(tempfile.gettempdir()) / f"trickle-build-{uid}" / key]
    for c in candidates:
        try:
            (c / "egg-info").mkdir(parents=True, exist_ok=True)
            if os.access(c, os.W_OK):
                return str(c)
        except OSError:
            pass
    sys.exit(
        "trickle: no writable build directory (tried " + ", ".join(str(c) for c in candidates)
        + "); set TRICKLE_BUILD_DIR to a writable directory"
    )


def find_nvcc(torch_cuda: str):
    """The CUDA toolkit root (holding bin/nvcc and include/cuda_runtime_api.h) to build with.

    In order: $CUDA_HOME or $CUDA_PATH; the nvcc on PATH; /usr/local/cuda; nvcc from PyPI
    (pip install nvidia-cuda-nvcc, next to torch's nvidia-* wheels: nvidia/cu<major>/ or
    nvidia/cuda_nvcc/). Returns (root, what was tried)."""
    import shutil
    import site

    tried, candidates = [], []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append((Path(os.environ[var]), f"${var}"))
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append((Path(nvcc).resolve().parent.parent, "nvcc on PATH"))
    candidates.append((Path("/usr/local/cuda"), "/usr/local/cuda"))
    major = torch_cuda.split(".")[0]
    roots = [Path(p) for p in site.getsitepackages() + [site.getusersitepackages()]]
    import torch

    roots.append(Path(torch.__file__).resolve().parent.parent)
    for r in roots:
        for sub in (f"nvidia/cu{major}", "nvidia/cuda_nvcc"):
            candidates.append((r / sub, "PyPI's nvidia-cuda-nvcc"))
    for root, why in candidates:
        tried.append(f"{root} ({why})")
        if (root / "bin" / "nvcc").is_file() and (root / "include" / "cuda_runtime_api.h").is_file():
            return root, tried
    return None, tried


def cuda_arch_list(torch) -> str:
    """The GPU architectures the CUDA engines are compiled for: $TORCH_CUDA_ARCH_LIST (torch's
    own variable, e.g. "8.0;9.0"); otherwise those of the GPUs this machine has; otherwise
    8.0 and 9.0 (A100, H100/H200), as the library's CMake build. Each one costs another
    device compilation of every engine."""
    env = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if env and env != "native":
        return env
    try:
        if torch.cuda.is_available():
            caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
            return ";".join(f"{a}.{b}" for a, b in caps)
    except Exception:  # noqa: BLE001 - no driver: the default below
        pass
    return "8.0;9.0"


def cuda_choice(torch):
    """(toolkit root, arch list) for a CUDA build, or (None, why not).

    $TRICKLE_CUDA: "0" builds for the CPU only; "1" requires a CUDA build (and fails saying
    what is missing); unset (auto) builds with CUDA when torch has CUDA and nvcc is found."""
    mode = os.environ.get("TRICKLE_CUDA", "auto").strip().lower()
    if mode in ("0", "off", "no", "false"):
        return None, "TRICKLE_CUDA=0"
    required = mode in ("1", "on", "yes", "true")
    if mode not in ("auto", "") and not required:
        sys.exit(f"trickle: TRICKLE_CUDA must be 0, 1 or unset, not '{os.environ['TRICKLE_CUDA']}'")
    why = None
    root = None
    if torch.version.cuda is None:
        why = f"torch {torch.__version__} was built without CUDA"
    else:
        root, tried = find_nvcc(torch.version.cuda)
        if root is None:
            why = ("no CUDA toolkit (bin/nvcc and include/cuda_runtime_api.h) found; tried " + ", ".join(tried)
                   + f". Install the toolkit, or nvcc from PyPI for torch's CUDA {torch.version.cuda}: "
                   f"pip install 'nvidia-cuda-nvcc=={torch.version.cuda}.*'")
    if why is not None:
        if required:
            sys.exit(f"trickle: TRICKLE_CUDA=1, but a CUDA build is not possible: {why}")
        return None, why
    return (root, cuda_arch_list(torch)), None


def extensions():
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit(
            "trickle: building the extension needs torch installed in the same environment; install torch first, "
            "then `pip install --no-build-isolation ./python` (build isolation would hide the installed torch)"
        )
    cuda, why_not = cuda_choice(torch)
    if cuda is not None:
        # torch.utils.cpp_extension reads CUDA_HOME and TORCH_CUDA_ARCH_LIST (at import and
        # at build time).
        os.environ["CUDA_HOME"] = str(cuda[0])
        os.environ["TORCH_CUDA_ARCH_LIST"] = cuda[1]
        print(f"trickle: CUDA build: nvcc from {cuda[0]}, architectures {cuda[1]}", file=sys.stderr)
    else:
        print(f"trickle: CPU-only build ({why_not}); CUDA tensors will be refused", file=sys.stderr)
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

    include = trickle_include_dir()
    base = build_dir(torch.__version__, torch.__file__)
    sources = sorted(str(p.relative_to(HERE)) for p in (HERE / "csrc").glob("*.cpp"))
    # -g0: the interpreter's CFLAGS carry -g, which would make a 50 MB module and a slower build.
    cxx = ["-std=c++20", "-O2", "-g0", "-fvisibility=hidden", "-Wno-deprecated-declarations"]
    if os.environ.get("TRICKLE_DEBUG_BUILD"):
        cxx = ["-std=c++20", "-O0", "-g"]
    # USE_C10D_GLOO: c10d's ProcessGroupGloo.hpp declares the Gloo group only with it (torch's
    # CMake targets define it; torch.utils.cpp_extension does not). comm::elastic_group
    # makes each epoch's group with it; torch's Linux builds (Debian's, PyPI's) have Gloo.
    macros = [("TRICKLE_HAS_TORCH", "1"), ("USE_C10D_GLOO", "1")]
    # A generated header says what the build chose (the arch list is no macro-safe token).
    generated = Path(base) / "generated"
    generated.mkdir(parents=True, exist_ok=True)
    config = '#pragma once\n#define TRICKLE_PY_CUDA_ARCHS "' + (cuda[1] if cuda else "") + '"\n'
    header = generated / "trickle_py_build.hpp"
    if not header.is_file() or header.read_text() != config:
        header.write_text(config)
    common = dict(
        name="trickle._C",
        include_dirs=[include, str(HERE / "csrc"), str(generated)],
        depends=[str(p) for p in (HERE / "csrc").glob("*.hpp")],
    )
    if cuda is None:
        ext = CppExtension(sources=sources, extra_compile_args={"cxx": cxx}, define_macros=macros, **common)
    else:
        # The engines over CUDA parameters (csrc/cuda_*.cu, nvcc, without torch's headers);
        # the g++ side declares them extern (csrc/cuda_engines.hpp). TRICKLE_ENABLE_CUDA
        # gives the g++ side trickle's CUDA declarations. torch adds -D__CUDA_NO_HALF_*
        # (its own kernels' convention); trickle's kernels use the CUDA headers as they are.
        sources += sorted(str(p.relative_to(HERE)) for p in (HERE / "csrc").glob("cuda_*.cu"))
        nvcc = ["-std=c++20", "-O2", "--expt-relaxed-constexpr", "-Xcompiler", "-fvisibility=hidden",
                "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__"]
        macros += [("TRICKLE_ENABLE_CUDA", "1"), ("TRICKLE_PY_CUDA", "1")]
        ext = CUDAExtension(sources=sources, extra_compile_args={"cxx": cxx, "nvcc": nvcc}, define_macros=macros,
                            **common)
    # Ninja (when installed) builds only what changed; MAX_JOBS limits its parallelism.
    options = {"build": {"build_base": base}, "egg_info": {"egg_base": str(Path(base) / "egg-info")}}
    return [ext], {"build_ext": with_precompiled_header(BuildExtension.with_options(use_ninja=True), generated)}, options


def is_gcc(cxx: str) -> bool:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return False
    return "Free Software Foundation" in out and "clang" not in out


def with_precompiled_header(base_class, generated: Path):
    """base_class (torch's BuildExtension) with csrc/common.hpp precompiled once.

    Every .cpp of csrc/ begins with `#include "common.hpp"`, which parses torch's pybind11,
    ATen, c10d and Gloo headers and trickle's: about a third of each file's compile time.
    With g++ (the compiler torch's ninja build runs, $CXX or c++), the header is compiled
    once into generated/trickle_py_pch.hpp.gch with exactly the flags the objects get, and
    each object is compiled with `-include` of it (and -Winvalid-pch, so a mismatch is
    said, never silent; g++ then parses the header as before). The .gch is rebuilt only
    when its command or one of the headers it read changed, so ninja's incremental
    rebuilds stay incremental. $TRICKLE_NO_PCH=1, another compiler, or a failed
    precompilation: the plain build.
    """

    class build_ext(base_class):
        def build_extension(self, ext):
            original = self.compiler.compile

            def compile_with_pch(sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                                 extra_preargs=None, extra_postargs=None, depends=None):
                post = extra_postargs
                cxx_post = post["cxx"] if isinstance(post, dict) else list(post or [])
                pch = precompile(self.compiler, output_dir, macros, include_dirs, debug, extra_preargs, cxx_post,
                                 depends)
                if pch is not None:
                    # (g++ 12 forgets inside a precompiled header that its own intrinsics
                    # headers are system headers, and warns in them at -O2: about 300 lines of
                    # -Wmaybe-uninitialized in avx512fintrin.h per build without this flag.)
                    # -fpch-deps: each object's dependency file lists the headers the
                    # precompiled one was made from (without it, only its .cpp), so that
                    # ninja rebuilds it when one of them changes.
                    cxx_post = cxx_post + ["-include", pch, "-fpch-deps", "-Winvalid-pch", "-Wno-maybe-uninitialized"]
                    post = dict(post, cxx=cxx_post) if isinstance(post, dict) else cxx_post
                return original(sources, output_dir, macros, include_dirs, debug, extra_preargs, post, depends)

            self.compiler.compile = compile_with_pch
            try:
                super().build_extension(ext)
            finally:
                self.compiler.compile = original

    def precompile(compiler, output_dir, macros, include_dirs, debug, extra_preargs, cxx_post, depends):
        cxx = os.environ.get("CXX", "c++")
        if os.environ.get("TRICKLE_NO_PCH") == "1" or not is_gcc(cxx):
            return None
        header = generated / "trickle_py_pch.hpp"
        text = "// Generated by python/setup.py: the header every csrc/*.cpp begins with, precompiled.\n" \
               '#include "common.hpp"\n'
        if not header.is_file() or header.read_text() != text:
            header.write_text(text)
        gch = Path(str(header) + ".gch")
        # The flags torch's ninja rule gives an object (torch.utils.cpp_extension's
        # unix_wrap_ninja_compile): the compiler's own, the include and macro options, then
        # the extension's cxx flags.
        _, _, _, pp_opts, _ = compiler._setup_compile(output_dir or ".", macros, include_dirs, [], depends, [])
        cflags = compiler.compiler_so[1:] + [a for a in compiler._get_cc_args(pp_opts, debug, extra_preargs) if a != "-c"]
        command = [cxx, "-MMD", "-MF", str(gch) + ".d"] + cflags + ["-x", "c++-header", str(header), "-o", str(gch)] \
            + list(cxx_post)
        stamp = Path(str(gch) + ".cmd")
        if gch.is_file() and stamp.is_file() and stamp.read_text() == shlex.join(command) and up_to_date(gch):
            return str(header)
        print("trickle: precompiling csrc/common.hpp (once for every .cpp)", file=sys.stderr)
        done = subprocess.run(command, check=False)
        if done.returncode != 0:
            print("trickle: the header did not precompile; building without it", file=sys.stderr)
            gch.unlink(missing_ok=True)
            return None
        stamp.write_text(shlex.join(command))
        return str(header)

    def up_to_date(gch: Path) -> bool:
        deps = Path(str(gch) + ".d")
        if not deps.is_file():
            return False
        built = gch.stat().st_mtime
        names = deps.read_text().replace("\\\n", " ").split(":", 1)[-1].split()
        return all(Path(n).is_file() and Path(n).stat().st_mtime <= built for n in names)

    return build_ext


ext_modules, cmdclass, options = extensions()
# options: defaults that setup.cfg and the command line override (setuptools' precedence).
setup(ext_modules=ext_modules, cmdclass=cmdclass, options=options)
