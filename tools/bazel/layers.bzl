"""The layers of the tree: the one place their order is written (README, "Layout", says what each holds).

tools/bazel/BUILD turns them into the package groups that the layers' BUILD files name as visibility,
runtime.bzl orders runtime/'s packages by RUNTIME_ORDER, and tests:layer_rule_test checks every #include against
them through the header layer_order_header writes."""

# The top-level folders, lowest first: each may use only those before it.
LAYERS = ["runtime", "kernels", "models", "data", "parallel", "tools"]

# Lower layers a layer may not use all the same ("knows nothing of").
KNOWS_NOTHING_OF = {"data": ["models"]}

# runtime/'s packages, lowest first: each may use only those before it.
RUNTIME_ORDER = ["base", "memory", "tensor", "nn", "formats", "optim", "progress"]

# Subfolders that are siblings: neither may use the other's files, unless both are in one group (the CUDA
# backend runs on its own kernels, cuDNN and cuBLAS); files directly in the folder are shared by all of them
# and may use none. Each group's name is the package group of tools/bazel/BUILD its packages are visible to.
SIBLINGS = {
    "kernels": {
        "cpu_backend": ["cpu"],
        "cuda_backend": ["cuda", "cudnn", "cublas"],
    },
    "parallel": {
        "bd": ["bd"],
        "cyclic": ["cyclic"],
    },
}

# Folders outside the layers that see every layer.
OUTSIDE = ["bench", "tests"]

# The simulated GPU: the CUDA runtime, driver entry points, cuBLAS, cuDNN and NCCL of the simulator build, at its
# bottom. Nothing of Tandem's includes its files (the simulator build reaches it through NVIDIA's headers; only its
# own tests include it), and it includes only its own files and these headers: the standard library (C++'s
# extensionless headers), NVIDIA's CUDA toolkit headers, its third-party library (Boost.Context) and the POSIX and
# sanitizer interfaces it names (prefixes of what is written between <>).
CUDASIM = "tools/cudasim"
CUDASIM_SYSTEM_INCLUDES = [
    # NVIDIA's CUDA toolkit
    "cuda",
    "cublas",
    "cudnn",
    "nccl",
    "device_launch_parameters.h",
    "driver_types.h",
    "vector_types.h",
    "library_types.h",
    # Boost.Context
    "boost/context/",
    # POSIX and the compiler's sanitizer interfaces
    "unistd.h",
    "sys/mman.h",
    "sanitizer/",
]

def _users(layer, include_self):
    """The packages that may use `layer`: the layers above it that know of it, and the outside folders."""
    rank = LAYERS.index(layer)
    above = [l for l in LAYERS[rank + 1:] if layer not in KNOWS_NOTHING_OF.get(l, [])]
    return ["//%s/..." % f for f in sorted(([layer] if include_self else []) + above + OUTSIDE)]

def layer_package_groups():
    """The package groups the layers' BUILD files name as their visibility (in tools/bazel/BUILD)."""
    native.package_group(name = "above_runtime", packages = _users("runtime", False))
    native.package_group(name = "above_kernels", packages = _users("kernels", False))
    native.package_group(name = "models_users", packages = _users("models", True))
    native.package_group(name = "data_users", packages = _users("data", True))
    native.package_group(name = "above_parallel", packages = _users("parallel", False))

    # Each group of kernels' siblings is visible to itself, to kernels/'s shared files and to the layers above.
    for group, folders in SIBLINGS["kernels"].items():
        native.package_group(
            name = group,
            includes = [":above_kernels"],
            packages = ["//kernels"] + ["//kernels/%s/..." % f for f in sorted(folders)],
        )

    # parallel/'s shared files are visible to all of parallel/, each method to itself, both to the layers above.
    native.package_group(name = "parallel_core", includes = [":above_parallel"], packages = ["//parallel/..."])
    for group, folders in SIBLINGS["parallel"].items():
        native.package_group(
            name = group,
            includes = [":above_parallel"],
            packages = ["//parallel/%s/..." % f for f in sorted(folders)],
        )

def _cc_strings(items):
    return "{" + ", ".join(['"%s"' % i for i in items]) + "}"

def layer_order_header(name, out):
    """A genrule writing `out`, a C++ header that states this file's layers for tests:layer_rule_test."""
    knows_nothing_of = ", ".join(['{"%s", %s}' % (k, _cc_strings(v)) for k, v in sorted(KNOWS_NOTHING_OF.items())])
    sibling_groups = ", ".join([
        '{"%s", {%s}}' % (folder, ", ".join([_cc_strings(g) for _, g in sorted(groups.items())]))
        for folder, groups in sorted(SIBLINGS.items())
    ])
    lines = [
        "// The layers of tools/bazel/layers.bzl, written by its layer_order_header for tests:layer_rule_test.",
        "#pragma once",
        "#include <map>",
        "#include <set>",
        "#include <string>",
        "#include <vector>",
        "namespace tandem {",
        "namespace layers {",
        "const std::vector<std::string> kLayers = %s;" % _cc_strings(LAYERS),
        "const std::map<std::string, std::set<std::string>> kKnowsNothingOf = {%s};" % knows_nothing_of,
        "const std::map<std::string, std::vector<std::string>> kSublayers = {{\"runtime\", %s}};" %
        _cc_strings(RUNTIME_ORDER),
        "const std::map<std::string, std::vector<std::set<std::string>>> kSiblingGroups = {%s};" % sibling_groups,
        "const std::string kCudasim = \"%s\";" % CUDASIM,
        "const std::vector<std::string> kCudasimSystemIncludes = %s;" % _cc_strings(CUDASIM_SYSTEM_INCLUDES),
        "}  // namespace layers",
        "}  // namespace tandem",
    ]
    native.genrule(
        name = name,
        outs = [out],
        cmd = "cat > $@ <<'EOF'\n%s\nEOF" % "\n".join(lines),
    )
