#!/usr/bin/env python3
"""The shared libraries of the GPU bundle: `gather` copies into the bundle's library folder every library its
binaries need (DT_NEEDED, recursively, found on this machine) that a CUDA machine does not provide; `check`
fails, naming each missing library and who needs it, unless every library any ELF file of the bundle needs is
in the bundle (through the file's $ORIGIN-relative RUNPATH, or in the library folder, which run.sh puts on
LD_LIBRARY_PATH) or among what a CUDA machine provides: glibc, libstdc++, libgcc_s, the CUDA driver and the
CUDA runtime, cuBLAS, cuDNN, NCCL, CUPTI and NVRTC (which run.sh finds in PyTorch's packages or the toolkit).

Only DT_NEEDED entries are followed: libraries opened with dlopen (cuDNN's engines, OpenMPI's plugins, loaded
by MPI_Init in multi-process runs only) are not seen.

usage: bundle_libs.py gather|check BUNDLE LIBDIR     (LIBDIR relative to BUNDLE)
"""
import fnmatch
import os
import re
import shutil
import subprocess
import sys

# What a machine set up for CUDA (an image built for PyTorch) has, by soname pattern.
PROVIDED = [
    ("glibc", ["ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libmvec.so.1", "libdl.so.2", "libpthread.so.0",
               "librt.so.1", "libresolv.so.2", "libutil.so.1", "libanl.so.1"]),
    ("the C++ runtime", ["libstdc++.so.6", "libgcc_s.so.1"]),
    ("the CUDA driver", ["libcuda.so.1", "libnvidia-*.so*"]),
    ("CUDA's libraries", ["libcudart.so.*", "libcublas.so.*", "libcublasLt.so.*", "libcudnn*.so.*", "libnccl.so.*",
                          "libcupti.so.*", "libnvrtc*.so.*"]),
]


def provided(name):
    return any(fnmatch.fnmatchcase(name, p) for _, patterns in PROVIDED for p in patterns)


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def elf_files(root):
    for folder, _, files in os.walk(root):
        for f in sorted(files):
            path = os.path.join(folder, f)
            if os.path.isfile(path) and is_elf(path):
                yield path


def dynamic(path):
    """The file's DT_NEEDED names and its RUNPATH (or RPATH) folders, $ORIGIN expanded."""
    out = subprocess.run(["readelf", "-d", "-W", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, LC_ALL="C"), check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    paths = []
    for m in re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]*)\]", out):
        origin = os.path.dirname(os.path.abspath(path))
        paths += [p.replace("${ORIGIN}", origin).replace("$ORIGIN", origin) for p in m.split(":") if p]
    return needed, paths


def inside(path, root):
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root + os.sep)


def missing_libraries(bundle, libdir):
    """{library name: [the bundle's files that need it]} for what neither the bundle nor a CUDA machine has."""
    missing = {}
    for path in elf_files(bundle):
        needed, runpath = dynamic(path)
        folders = [d for d in runpath if inside(d, bundle)] + [libdir]
        for name in needed:
            if provided(name) or any(os.path.isfile(os.path.join(d, name)) for d in folders):
                continue
            missing.setdefault(name, []).append(os.path.relpath(path, bundle))
    return missing


def system_paths(path):
    """{name: path} of the libraries this machine's loader resolves for the file (ldd, transitively)."""
    out = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    return dict(re.findall(r"^\s*(\S+) => (/\S+)", out, re.M))


def gather(bundle, libdir):
    os.makedirs(libdir, exist_ok=True)
    while True:  # until the libraries copied need nothing more
        missing = missing_libraries(bundle, libdir)
        copied = 0
        for name, users in sorted(missing.items()):
            source = system_paths(os.path.join(bundle, users[0])).get(name)
            if source:
                shutil.copy(os.path.realpath(source), os.path.join(libdir, name))
                copied += 1
        if copied == 0:
            return


def check(bundle, libdir):
    missing = missing_libraries(bundle, libdir)
    for name, users in sorted(missing.items()):
        print("bundle_libs: %s is needed by %s%s, but it is neither in the bundle nor on a CUDA machine" % (
            name, ", ".join(users[:4]), " and %d more" % (len(users) - 4) if len(users) > 4 else ""))
    if not missing:
        count = sum(1 for _ in elf_files(bundle))
        print("bundle_libs: every library the bundle's %d ELF files need is in it or on a CUDA machine (%s)" % (
            count, "; ".join(what for what, _ in PROVIDED)))
    return 1 if missing else 0


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("gather", "check"):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    bundle = os.path.abspath(sys.argv[2])
    libdir = os.path.join(bundle, sys.argv[3])
    if sys.argv[1] == "gather":
        gather(bundle, libdir)
        return 0
    return check(bundle, libdir)


if __name__ == "__main__":
    sys.exit(main())
