"""runtime/'s packages in layer order (RUNTIME_ORDER of layers.bzl): each may depend only on those before it
(checked here when a BUILD file loads) and is visible only to those after it and to the layers above runtime/."""

load(":layers.bzl", "RUNTIME_ORDER")

def runtime_package(deps = [], external_deps = []):
    """The cc_library of the runtime package this BUILD file is in: its *.cc and *.h files.

    Args:
      deps: the earlier runtime packages it uses, by name ("base", "memory", ...).
      external_deps: other labels (third-party libraries).
    """
    name = native.package_name().split("/")[-1]
    if name not in RUNTIME_ORDER:
        fail("runtime/%s is not in RUNTIME_ORDER (tools/bazel/layers.bzl)" % name)
    rank = RUNTIME_ORDER.index(name)
    for dep in deps:
        if dep not in RUNTIME_ORDER or RUNTIME_ORDER.index(dep) >= rank:
            fail("runtime/%s may only use the runtime packages before it (%s), not %s" %
                 (name, ", ".join(RUNTIME_ORDER[:rank]) or "none", dep))
    native.cc_library(
        name = name,
        srcs = native.glob(["*.cc"]),
        hdrs = native.glob(["*.h"]),
        deps = ["//runtime/" + d for d in deps] + external_deps,
        visibility = ["//runtime:__pkg__", "//tools/bazel:above_runtime"] +
                     ["//runtime/%s:__pkg__" % later for later in RUNTIME_ORDER[rank + 1:]],
    )
