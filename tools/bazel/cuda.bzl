"""cuda_library: compiles .cu files with the system nvcc and wraps the objects in a cc_library.

There is no rules_cuda offline, so each .cu file becomes one `nvcc -c` action. Kernels and
their launchers live in the same .cu file (no relocatable device code, no device link step);
device helpers shared between files go in headers.
"""

NVCC = "/usr/local/cuda/bin/nvcc"

# sm_80 (A100) and sm_90 (H100/H200) machine code, plus PTX for newer GPUs.
CUDA_ARCH_FLAGS = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

def _cuda_objects_impl(ctx):
    cc_infos = [d[CcInfo] for d in ctx.attr.deps if CcInfo in d]
    headers = []
    includes = []
    defines = []
    for info in cc_infos:
        cctx = info.compilation_context
        headers.append(cctx.headers)
        includes += ["-I" + p for p in cctx.includes.to_list()]
        includes += ["-I" + p for p in cctx.quote_includes.to_list()]
        for p in cctx.system_includes.to_list():
            includes += ["-isystem", p]  # nvcc takes -isystem and its path as two arguments
        defines += ["-D" + d for d in cctx.defines.to_list()]
    own_headers = [f for f in ctx.files.hdrs]
    all_headers = depset(own_headers, transitive = headers)

    objects = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_objs/%s/%s.o" % (ctx.label.name, src.basename[:-len(".cu")]))
        args = ctx.actions.args()
        args.add("-c", src)
        args.add("-o", obj)
        args.add_all([
            "-std=c++17",
            "-O3",
            "-lineinfo",
            "-Xcompiler=-fPIC,-Wall,-Wextra",
            "-Werror=all-warnings",
            "-I.",
            "-I" + ctx.bin_dir.path,
            "-I" + ctx.genfiles_dir.path,
        ])
        args.add_all(CUDA_ARCH_FLAGS)
        args.add_all(includes)
        args.add_all(defines)
        args.add_all(ctx.attr.copts)
        ctx.actions.run(
            executable = NVCC,
            arguments = [args],
            inputs = depset([src], transitive = [all_headers]),
            outputs = [obj],
            mnemonic = "NvccCompile",
            progress_message = "nvcc %s" % src.short_path,
            use_default_shell_env = True,
        )
        objects.append(obj)
    return [DefaultInfo(files = depset(objects))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
    },
)

# Flags of the .cu files in the simulator build (C++ with the SIMT header, see below).
CUDASIM_COPTS = [
    "-DTANDEM_CUDASIM=1",
    "-Wno-unknown-pragmas",
]

# The simulator build's kernel objects report their accesses to device and shared memory to the simulated GPU's
# cost counters (tools/cudasim/counters.cc): GCC's kernel-address instrumentation, its checks inline against the
# simulator's shadow (which marks only that memory, and only while counting), without stack or global redzones,
# and without the __SANITIZE_ADDRESS__ it defines (no sanitizer runs). Not in the sanitizer builds, whose
# instrumentation it would clash with (the counters then see no accesses).
CUDASIM_COUNTING_COPTS = [
    "-fsanitize=kernel-address",
    "-fasan-shadow-offset=0x7fff8000",
    "--param=asan-instrumentation-with-call-threshold=1000000",
    "--param=asan-stack=0",
    "--param=asan-globals=0",
    "-U__SANITIZE_ADDRESS__",
]

def _cudasim_source(name, src):
    """The C++ file the simulator build compiles for `src`: the SIMT header, then the .cu file after a #line
    directive (so that __FILE__ and diagnostics name the .cu file). The header is pasted rather than included
    so that it is an input of the kernel compiles only: every other compile stays the same action as in
    NVIDIA's build, and the two builds share those objects."""
    out = "_cudasim/%s/%s.cc" % (name, src[:-len(".cu")])
    native.genrule(
        name = "%s_cudasim_%s" % (name, src[:-len(".cu")].replace("/", "_")),
        srcs = [src, "//tools/cudasim:simt.h"],
        outs = [out],
        cmd = ("(sed '/^#pragma once/d' $(location //tools/cudasim:simt.h); " +
               "echo '#line 1 \"$(location %s)\"'; cat $(location %s)) > $@") % (src, src),
        tags = ["manual"],
    )
    return out

def cuda_library(name, srcs = [], hdrs = [], deps = [], copts = [], alwayslink = False, visibility = None, **kwargs):
    """A cc_library of .cu sources: nvcc for sm_80, sm_90 and compute_90 PTX, or, in the simulator build
    (--config=cudasim), the same sources compiled as C++ against tools/cudasim."""
    _cuda_objects(
        name = name + "_cuda_objects",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:headers"],
        copts = copts,
        tags = ["manual"],
    )
    sim_srcs = [_cudasim_source(name, src) for src in srcs]
    native.cc_library(
        name = name,
        srcs = select({
            "//tools/cudasim:enabled": sim_srcs,
            "//conditions:default": [":" + name + "_cuda_objects"],
        }),
        hdrs = hdrs,
        copts = select({
            "//tools/cudasim:enabled": CUDASIM_COPTS + copts,
            "//conditions:default": [],
        }) + select({
            "//tools/cudasim:sanitized": [],
            "//tools/cudasim:enabled": CUDASIM_COUNTING_COPTS,
            "//conditions:default": [],
        }),
        deps = deps + ["//third_party:cudart", "@cuda//:headers"],
        alwayslink = alwayslink,
        visibility = visibility,
        **kwargs
    )

def cudasim_test(name, srcs = [], deps = [], copts = [], **kwargs):
    """A cc_test whose .cu sources always run on the simulated GPU (tests of the simulator itself)."""
    native.cc_test(
        name = name,
        srcs = [_cudasim_source(name, s) if s.endswith(".cu") else s for s in srcs],
        copts = CUDASIM_COPTS + copts + select({
            "//tools/cudasim:sanitized": [],
            "//conditions:default": CUDASIM_COUNTING_COPTS,
        }),
        deps = deps + ["//tools/cudasim:libraries"],
        **kwargs
    )
