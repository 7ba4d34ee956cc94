"""Build script of the `trickle` Python package (a torch C++ extension over the header-only library).

Install from the repository root with the torch you will train with already installed:

    pip install --no-build-isolation ./python

The extension is compiled against that torch (its headers and libraries), with -std=c++20,
and the trickle headers found by `trickle_include_dir()` below.

Nothing is written into the source tree, so a read-only checkout installs: the build
directory (objects, build/lib, bdist) and the egg-info live in `build_dir()` below,
$TRICKLE_BUILD_DIR or a per-user cache directory.
"""

import hashlib
import os
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


def extensions():
    try:
        import torch  # noqa: F401
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError:
        sys.exit(
            "trickle: building the extension needs torch installed in the same environment; install torch first, "
            "then `pip install --no-build-isolation ./python` (build isolation would hide the installed torch)"
        )
    include = trickle_include_dir()
    sources = sorted(str(p.relative_to(HERE)) for p in (HERE / "csrc").glob("*.cpp"))
    # -g0: the interpreter's CFLAGS carry -g, which would make a 50 MB module and a slower build.
    cxx = ["-std=c++20", "-O2", "-g0", "-fvisibility=hidden", "-Wno-deprecated-declarations"]
    if os.environ.get("TRICKLE_DEBUG_BUILD"):
        cxx = ["-std=c++20", "-O0", "-g"]
    ext = CppExtension(
        name="trickle._C",
        sources=sources,
        include_dirs=[include, str(HERE / "csrc")],
        extra_compile_args={"cxx": cxx},
        # USE_C10D_GLOO: c10d's ProcessGroupGloo.hpp declares the Gloo group only with it (torch's
        # CMake targets define it; torch.utils.cpp_extension does not). comm::elastic_group
        # makes each epoch's group with it; torch's Linux builds (Debian's, PyPI's) have Gloo.
        define_macros=[("TRICKLE_HAS_TORCH", "1"), ("USE_C10D_GLOO", "1")],
        depends=[str(p) for p in (HERE / "csrc").glob("*.hpp")],
    )
    # Ninja (when installed) builds only what changed; MAX_JOBS limits its parallelism.
    base = build_dir(torch.__version__, torch.__file__)
    options = {"build": {"build_base": base}, "egg_info": {"egg_base": str(Path(base) / "egg-info")}}
    return [ext], {"build_ext": BuildExtension.with_options(use_ninja=True)}, options


ext_modules, cmdclass, options = extensions()
# options: defaults that setup.cfg and the command line override (setuptools' precedence).
setup(ext_modules=ext_modules, cmdclass=cmdclass, options=options)
