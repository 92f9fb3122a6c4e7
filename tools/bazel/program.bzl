"""tandem_program: a command-line program of Tandem (tools/, bench/)."""

def tandem_program(name, srcs, deps = [], visibility = ["//visibility:public"], **kwargs):
    """A cc_binary that links every backend (//kernels:all registers them) and the flag parser.

    Args:
      name: the program's name.
      srcs: its sources.
      deps: what it uses besides //kernels:all and //tools/flags.
      visibility: who may use it (default: everyone; the launcher and the tests run the programs).
      **kwargs: passed to cc_binary.
    """
    native.cc_binary(
        name = name,
        srcs = srcs,
        visibility = visibility,
        deps = deps + [
            "//kernels:all",
            "//tools/flags",
        ],
        **kwargs
    )

def bench_program(name, deps = []):
    """A benchmark program: tandem_program from NAME.cc, visible to tests/tools, which tests its command line.

    Args:
      name: the program's name; its source is name + ".cc".
      deps: what it uses besides //kernels:all and //tools/flags.
    """
    tandem_program(
        name = name,
        srcs = [name + ".cc"],
        deps = deps,
        visibility = ["//tests/tools:__pkg__"],
    )
