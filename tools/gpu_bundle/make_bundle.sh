#!/usr/bin/env bash
# Builds every GPU test, benchmark and training program with -c opt into gpu-bundle/ (git-ignored, < 64 MiB),
# with run.sh, the runner for the GPU machine. Called by `tools/tandem gpu-bundle` (Bazel flags as arguments).
# The binaries link Tandem's libraries dynamically (--dynamic_mode=fully), so the kernels' device code is
# carried once in gpu-bundle/_solib_k8 instead of once per binary. The other libraries they need that a CUDA
# machine lacks (oneDNN, OpenMPI, libjpeg, ...) travel xz-compressed in lib.tar.xz, which run.sh unpacks; the
# build fails if any library a binary needs is neither in the bundle nor on a CUDA machine (bundle_libs.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT="$ROOT/gpu-bundle"
LIMIT=$((64 * 1024 * 1024))
MODE=(-c opt --dynamic_mode=fully --strip=always)

# The one test binary, every benchmark, and the programs that train on a GPU.
TARGETS=(//tests:gpu_tests //tools/train //tools/distill //tools/cyclic //tools/demo)
while read -r t; do TARGETS+=("$t"); done < <(bazel query 'kind("cc_binary", //bench/...)' 2>/dev/null)

bazel build "$@" "${MODE[@]}" "${TARGETS[@]}"
BIN="$(bazel info "$@" "${MODE[@]}" bazel-bin 2>/dev/null)"

rm -rf "$OUT"
mkdir -p "$OUT"
for t in "${TARGETS[@]}"; do
  pkg="${t#//}"; pkg="${pkg%%:*}"; name="${t##*:}"; name="${name##*/}"
  mkdir -p "$OUT/$pkg"
  cp "$BIN/$pkg/$name" "$OUT/$pkg/$name"
  chmod u+w "$OUT/$pkg/$name"
  # Tandem's own shared libraries, at the same place relative to the binary (its RUNPATH is $ORIGIN-relative).
  ldd "$BIN/$pkg/$name" | awk '/_solib_k8/ {print $3}' | while read -r lib; do
    rel="${lib#"$BIN"/}"
    [ -e "$OUT/$rel" ] || { mkdir -p "$OUT/$(dirname "$rel")"; cp -L "$lib" "$OUT/$rel"; }
  done
done
chmod -R u+w "$OUT"

# Every other library that a binary or library needs and a CUDA machine lacks, checked, then compressed.
python3 "$ROOT/tools/gpu_bundle/bundle_libs.py" gather "$OUT" lib
python3 "$ROOT/tools/gpu_bundle/bundle_libs.py" check "$OUT" lib
echo "gpu-bundle: compressing $(du -sh "$OUT/lib" | cut -f1) of libraries ($(ls "$OUT/lib" | paste -sd' '))"
tar -cf - -C "$OUT/lib" . | xz -6 >"$OUT/lib.tar.xz"
rm -rf "$OUT/lib"

cp "$ROOT/tools/gpu_bundle/run.sh" "$ROOT/tools/gpu_bundle/run_chunks.py" "$OUT/"
mkdir -p "$OUT/tests/data"
cp "$ROOT"/tests/data/*.safetensors "$OUT/tests/data/" 2>/dev/null || true
if compgen -G "$ROOT/bench/torch/*.py" >/dev/null; then
  mkdir -p "$OUT/torch"
  cp "$ROOT"/bench/torch/*.py "$OUT/torch/"
fi
echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD \
  2>/dev/null || echo ' with local changes'), built $(date -u '+%F %T UTC')" >"$OUT/bundle.txt"

size=$(du -sb "$OUT" | cut -f1)
echo "gpu-bundle: $(du -sh "$OUT" | cut -f1) ($size bytes) in $OUT (limit 64 MiB): $(cat "$OUT/bundle.txt")"
(cd "$OUT" && du -sh _solib_k8 lib.tar.xz tests/data 2>/dev/null | sed 's/^/  /')
(cd "$OUT" && find . -type f -perm -u+x -not -name '*.so*' -not -name '*.sh' -not -name '*.py' | sort |
  while read -r f; do printf '  %-36s %s\n' "${f#./}" "$(du -h "$f" | cut -f1)"; done)
if [ "$size" -ge "$LIMIT" ]; then
  echo "gpu-bundle is $size bytes, over the 64 MiB limit" >&2
  exit 1
fi
