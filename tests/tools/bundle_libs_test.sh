#!/usr/bin/env bash
# tools/gpu_bundle/bundle_libs.py on a bundle of one program (needs_libs: oneDNN, OpenMPI and a library of its
# own through its $ORIGIN-relative RUNPATH): check names what a CUDA machine lacks (oneDNN and OpenMPI were
# missing from the first real bundle), gather copies it with what it needs in turn, and check then passes;
# a library missing deeper down (needed by a gathered one) or a RUNPATH library left behind is named again.
set -u
source "$1"
BUNDLE_LIBS="$2" NEEDS_LIBS="$3"
# run NAME CODE ARGS...: bundle_libs.py ARGS exits with CODE; its output is in $out.
run() {
  local name="$1" code="$2"
  shift 2
  out="$(python3 "$BUNDLE_LIBS" "$@" 2>&1)"
  local rc=$?
  [ "$rc" -eq "$code" ] || fail "$name: exit $rc, expected $code:"$'\n'"$out"
}

# The bundle: the program and its own library at the places its RUNPATH names, as make_bundle.sh copies them.
bundle="$work/bundle"
mkdir -p "$bundle/$(dirname "$NEEDS_LIBS")"
cp -L "$NEEDS_LIBS" "$bundle/$NEEDS_LIBS"
cp -rL "$(dirname "$NEEDS_LIBS")/../../_solib_k8" "$bundle/_solib_k8"
chmod -R u+w "$bundle"

run "check before gather" 1 check "$bundle" lib
has "libdnnl.so.2 is needed by $NEEDS_LIBS, but it is neither in the bundle nor on a CUDA machine" "$out" "check"
has "libmpi.so.40 is needed by $NEEDS_LIBS" "$out" "check"
has "libgomp.so.1 is needed by $NEEDS_LIBS" "$out" "check"
for provided in libc.so.6 libstdc++.so.6 libm.so.6 libneeds_libs_part libtests_Stools_Slibneeds; do
  lacks "$provided" "$out" "check"
done

run "gather" 0 gather "$bundle" lib
for lib in libdnnl.so.2 libgomp.so.1 libmpi.so.40 libopen-pal.so.40; do
  [ -f "$bundle/lib/$lib" ] || fail "gather did not copy $lib: $(ls "$bundle/lib" 2>&1)"
done
for lib in libc.so.6 libstdc++.so.6 libm.so.6; do
  [ ! -e "$bundle/lib/$lib" ] || fail "gather copied $lib, which every CUDA machine has"
done
run "check after gather" 0 check "$bundle" lib
has "every library the bundle's" "$out" "check after gather"

# libopen-pal is needed by OpenMPI's libraries, not by the program: the check follows the gathered libraries.
rm "$bundle/lib/libopen-pal.so.40"
run "check without libopen-pal" 1 check "$bundle" lib
has "libopen-pal.so.40 is needed by lib/" "$out" "check without libopen-pal"
lacks "libdnnl" "$out" "check without libopen-pal"

# The program's own library counts only where its RUNPATH finds it inside the bundle.
rm -rf "$bundle/_solib_k8"
run "check without _solib_k8" 1 check "$bundle" lib
has "libtests_Stools_Slibneeds_Ulibs_Upart.so is needed by $NEEDS_LIBS" "$out" "check without _solib_k8"

finish
