"""checked_test: a test of a library of cases, and the same cases under the stream checker."""

def checked_test(name, cases, size = "small", tags = [], main = ["//third_party:gtest_main"]):
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
