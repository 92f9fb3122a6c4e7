"""The macros of the tests' BUILD files: what every test target shares, so that each target states only its own."""

TESTING = "//tests:testing"
GTEST_MAIN = "//third_party:gtest_main"

def _label_key(label):
    # The order the BUILD files kept deps in by hand (local labels first, then by text): a link line follows the
    # order of deps, so this order keeps the tests' link actions (and their cache entries) as they were.
    return (0 if label.startswith(":") else 1, label)

def _deps(deps, testing, main):
    return sorted(deps + ([TESTING] if testing else []) + main, key = _label_key)

def test_library(name, deps = [], srcs = None, hdrs = None, testing = True, **kwargs):
    """A testonly cc_library of test helpers with, unless testing = False, the shared helpers //tests:testing.

    Args:
      name: the library; its sources are `name`.cc and `name`.h unless srcs and hdrs say otherwise.
      deps: its own dependencies.
      srcs: the sources, when not `name`.cc.
      hdrs: the headers, when not `name`.h.
      testing: whether it links //tests:testing.
      **kwargs: other cc_library attributes (visibility).
    """
    native.cc_library(
        name = name,
        testonly = True,
        srcs = [name + ".cc"] if srcs == None else srcs,
        hdrs = [name + ".h"] if hdrs == None else hdrs,
        deps = _deps(deps, testing, []),
        **kwargs
    )

def unit_test(name, deps = [], srcs = None, size = "small", testing = True, **kwargs):
    """A cc_test with GoogleTest's main and, unless testing = False, the shared helpers //tests:testing.

    Args:
      name: the test; its source is `name`.cc unless srcs says otherwise.
      deps: its own dependencies.
      srcs: the sources, when not `name`.cc.
      size: the test's size.
      testing: whether it links //tests:testing.
      **kwargs: other cc_test attributes (data, env, tags).
    """
    native.cc_test(
        name = name,
        size = size,
        srcs = [name + ".cc"] if srcs == None else srcs,
        deps = _deps(deps, testing, [GTEST_MAIN]),
        **kwargs
    )

def cases_test(
        name,
        deps = [],
        cases = None,
        srcs = None,
        testing = True,
        checked = False,
        size = "small",
        tags = [],
        main = [GTEST_MAIN],
        visibility = None,
        env = None,
        data = None):
    """A test run from a library of its cases (alwayslink), which a GPU test binary (:gpu_tests) can link too.

    Args:
      name: the test (with checked, also `name`_stream_check).
      deps: the cases' own dependencies.
      cases: the library's name, when not `name` with _test replaced by _cases.
      srcs: the cases' sources, when not `name`.cc.
      testing: whether the cases link //tests:testing.
      checked: also run the cases under the stream checker (checked_test).
      size: the test's size.
      tags: the test's tags.
      main: what provides main() ([] where the cases bring their own).
      visibility: the library's visibility, when not the package's.
      env: the test's environment (not with checked, which sets its own).
      data: the test's runtime files (not with checked).
    """
    if cases == None:
        if not name.endswith("_test"):
            fail("cases_test %s: name the cases library (cases = ...) when the test's name does not end in _test" %
                 name)
        cases = name[:-len("_test")] + "_cases"
    native.cc_library(
        name = cases,
        testonly = True,
        srcs = [name + ".cc"] if srcs == None else srcs,
        visibility = visibility,
        deps = _deps(deps, testing, []),
        alwayslink = True,
    )
    if checked:
        if env != None or data != None:
            fail("cases_test %s: a checked test sets its own env and takes no data" % name)
        checked_test(name = name, cases = ":" + cases, size = size, tags = tags, main = main)
    else:
        native.cc_test(
            name = name,
            size = size,
            env = env,
            data = data,
            tags = tags,
            deps = [":" + cases] + main,
        )

def checked_test(name, cases, size = "small", tags = [], main = [GTEST_MAIN]):
    """Two cc_tests of the same cases: `name`, and `name`_stream_check under the stream checker.

    Under TANDEM_STREAM_CHECK=1 a missing stream order, or a false report, fails the cases.

    Args:
      name: the plain test's name.
      cases: the cc_library (alwayslink) holding the cases.
      size: both tests' size.
      tags: both tests' tags.
      main: what provides main() ([] where the cases bring their own).
    """
    for suffix, env in [("", {}), ("_stream_check", {"TANDEM_STREAM_CHECK": "1"})]:
        native.cc_test(
            name = name + suffix,
            size = size,
            env = env,
            tags = tags,
            deps = [cases] + main,
        )

def script_test(name, tools):
    """A small sh_test of `name`.sh, given the runfiles paths of the tools it runs as its arguments.

    Args:
      name: the test.
      tools: labels of the files or programs it runs, in the order of its arguments.
    """
    native.sh_test(
        name = name,
        size = "small",
        srcs = [name + ".sh"],
        args = ["$(rootpath %s)" % tool for tool in tools],
        data = tools,
    )
