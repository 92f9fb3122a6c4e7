#!/bin/sh
echo "bazel coverage is not supported in Tandem's offline build" >&2
exit 1
