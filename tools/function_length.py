#!/usr/bin/env python3
"""Lists the C++ and CUDA functions longer than a limit (default 120 lines), so none grows past it unseen.

usage:
  tools/function_length.py [--max LINES] [--summary OUT_JSON] [FILE...]

A function's length is the count of lines from the first line of its declaration (template line included) to
its closing brace. Lambdas, local classes and blocks inside a function count towards it; a lambda or member
function defined at namespace or class scope is a function of its own; class, namespace and enum bodies and
brace initializers are not functions. Each function over the limit is printed as "file:line: name (N lines)";
exit status 1 when any is. --summary writes the result in the format of tools/test_summary.py (one case), so
`tools/tandem test` counts it. FILEs default to the tracked *.h, *.cc, *.cu and *.cuh files outside tests/ and
third_party/. A file whose braces do not balance (after comments, strings and preprocessor lines are blanked)
is an error: it could hide a long function.
"""
import argparse
import os
import re
import subprocess
import sys

from test_summary import write_result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_ENDINGS = (".h", ".cc", ".cu", ".cuh")
DEFAULT_MAX = 120

# Comments, string and character literals (raw strings included), and preprocessor lines (with continuations).
_BLANKED = re.compile(r'''
    //[^\n]*
  | /\*.*?\*/
  | \bR"(?P<delim>[^(\s]*)\(.*?\)(?P=delim)"
  | "(?:\\.|[^"\\\n])*"
  | (?<![0-9A-Fa-f])'(?:\\.|[^'\\\n])+'
  | ^[ \t]*\#(?:\\\n|[^\n])*
''', re.VERBOSE | re.DOTALL | re.MULTILINE)

_SCOPE_HEAD = re.compile(r'(\bnamespace\b[^()]*|\bextern\s*|\b(?:class|struct|union)\b[^()]*)$')
_ENUM_HEAD = re.compile(r'\benum\b[^()]*$')
# A parameter list's ")" followed by what may stand between it and a function body.
_FUNCTION_TAIL = re.compile(
    r'\)\s*(?:(?:const|volatile|noexcept|override|final|mutable|constexpr|&&|&|noexcept\s*\([^)]*\)|throw\s*\(\s*\))'
    r'\s*)*(?:->[^{};]*)?$')
_CTOR_INITIALIZERS = re.compile(r'\)\s*(?:noexcept\s*)?:(?!:)')
_ACCESS = re.compile(r'^\s*(?:(?:public|private|protected)\s*:(?!:)\s*)+')
_ATTRIBUTES = re.compile(r'\b(?:__launch_bounds__|alignas)\s*\([^()]*\)|\b__attribute__\s*\(\(.*?\)\)|\[\[.*?\]\]')
_NAME = re.compile(r'((?:[\w~]+\s*(?:<[^<>]*>)?\s*::\s*)*(?:operator@|~?\w+))\s*(?:<[^<>]*>)?\s*$')


def blank(text):
    """The text with comments, literals and preprocessor lines turned into spaces; newlines are kept."""
    return _BLANKED.sub(lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text)


def function_name(head):
    """The name before a function head's parameter list ("lambda" for a lambda)."""
    head = _ATTRIBUTES.sub(' ', head)
    symbol = re.search(r'\boperator\s*(\(\s*\)|[^\w\s(]+)', head)
    if symbol:  # "operator<<" or "operator()": neither its angles nor its parentheses are the parameter list's
        head = head[:symbol.start()] + 'operator@' + head[symbol.end():]
    if re.search(r'\]\s*(?:\(|\{|mutable|$)', head) or re.search(r'\][^()\[\]]*\([^()]*\)[^()]*$', head):
        before = head[:head.rfind('[')]
        var = re.search(r'(\w+)\s*=\s*$', before)
        return (var.group(1) + " (lambda)") if var else "lambda"
    depth = 0
    for i, c in enumerate(head):
        if c == '<':
            depth += 1
        elif c == '>' and depth:
            depth -= 1
        elif c == '(' and depth == 0:
            m = _NAME.search(head[:i])
            if m:
                name = re.sub(r'\s+', '', m.group(1))
                return name.replace('operator@', 'operator' + re.sub(r'\s+', '', symbol.group(1))) if symbol else name
            break
    return "?"


class _Scanner:
    """Walks the braces of one blanked source and records (line, name, length) of each function."""

    def __init__(self, text):
        self.text = text
        self.braces = [(m.start(), m.group(0)) for m in re.finditer(r'[{}();]', text)]
        self.functions = []

    def line_of(self, pos):
        return self.text.count('\n', 0, pos) + 1

    def skip_block(self, k):
        """Index past the brace that closes the one at braces[k]."""
        depth, opened = 0, k
        while k < len(self.braces):
            c = self.braces[k][1]
            if c == '{':
                depth += 1
            elif c == '}':
                depth -= 1
                if depth == 0:
                    return k + 1
            k += 1
        raise ValueError("the '{' at line %d is never closed" % self.line_of(self.braces[opened][0]))

    def declarations(self, k, head_start, closing):
        """Scans a declaration scope (file, namespace, class body) from braces[k]; returns the index past its
        closing brace (or the end when closing is False)."""
        parens, opened_at = 0, head_start
        while k < len(self.braces):
            pos, c = self.braces[k]
            if c == '(':
                parens += 1
            elif c == ')':
                parens = max(0, parens - 1)
            elif c == ';' and parens == 0:
                head_start = pos + 1
            elif c == '}':
                if not closing:
                    raise ValueError("a '}' at line %d closes nothing" % self.line_of(pos))
                return k + 1
            elif c == '{':
                head = self.text[head_start:pos]
                if parens > 0:
                    # A lambda passed to a macro or a call at namespace scope: its own function.
                    if _FUNCTION_TAIL.search(head.rstrip()):
                        lam = head[head.rfind('['):] if '[' in head else head
                        k = self.function(k, pos - len(lam), lam)
                    else:
                        k = self.skip_block(k)
                    continue
                k = self.block(k, head_start, head)
                head_start = self.braces[k - 1][0] + 1
                continue
            k += 1
        if closing:
            raise ValueError("the '{' at line %d is never closed" % self.line_of(opened_at - 1))
        return k

    def block(self, k, head_start, head):
        """Handles the '{' at braces[k] in a declaration scope; returns the index past its block."""
        stripped = head.strip()
        if _SCOPE_HEAD.search(stripped):
            return self.declarations(k + 1, self.braces[k][0] + 1, True)
        if _ENUM_HEAD.search(stripped):
            return self.skip_block(k)
        if _CTOR_INITIALIZERS.search(stripped) and re.search(r'[\w>]\s*$', stripped):
            # A member's brace initializer in a constructor's list: the body follows.
            k = self.skip_block(k)
            while k < len(self.braces) and self.braces[k][1] != '{':
                k += 1
            if k == len(self.braces):
                raise ValueError("a constructor's body never opens")
            return self.block(k, head_start, self.text[head_start:self.braces[k][0]])
        if _FUNCTION_TAIL.search(stripped) or _CTOR_INITIALIZERS.search(stripped):
            return self.function(k, head_start, head)
        return self.skip_block(k)  # a brace initializer

    def function(self, k, head_start, head):
        end = self.skip_block(k)
        lead = _ACCESS.match(head)
        start = head_start + (lead.end() if lead else 0)
        start += len(self.text[start:]) - len(self.text[start:].lstrip())
        first, last = self.line_of(start), self.line_of(self.braces[end - 1][0])
        self.functions.append((first, function_name(head), last - first + 1))
        return end


def functions(text):
    """(first line, name, length in lines) of each function in a C++ source."""
    scanner = _Scanner(blank(text))
    scanner.declarations(0, 0, False)
    return scanner.functions


def tracked_sources():
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], check=True, capture_output=True).stdout
    return sorted(p for p in out.decode().split("\0")
                  if p.endswith(SOURCE_ENDINGS) and not p.startswith(("third_party/", "tests/")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max", type=int, default=DEFAULT_MAX, help="the longest a function may be (lines)")
    ap.add_argument("--summary", help="write the result for tools/test_summary.py report here")
    ap.add_argument("files", nargs="*", help="files relative to the repository root (default: tracked sources)")
    args = ap.parse_args()
    files = args.files or tracked_sources()
    long_ones, errors = [], []
    for path in files:
        try:
            with open(os.path.join(ROOT, path), errors="replace") as f:
                found = functions(f.read())
        except (OSError, ValueError) as e:
            errors.append("%s: %s" % (path, e))
            continue
        long_ones += ["%s:%d: %s (%d lines)" % (path, line, name, n) for line, name, n in found if n > args.max]
    for line in long_ones:
        print(line)
    for e in errors:
        print("error: " + e, file=sys.stderr)
    print("function length: %d functions over %d lines in %d files" % (len(long_ones), args.max, len(files)))
    failed = bool(errors or long_ones)
    if args.summary:
        notes = errors + (["%d functions over %d lines (split them into named steps): %s" %
                           (len(long_ones), args.max, "; ".join(long_ones))] if long_ones else [])
        write_result(args.summary, "function length (%d files)" % len(files),
                     {"//:function length (check)": "failed" if failed else "passed"}, notes)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
