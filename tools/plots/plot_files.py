"""What the figure scripts of tools/plots share: CSV files in and out, a figure saved with its plotted data, and
the command line's printing of the paths written."""

import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def save(fig, out_dir, name, header, rows, dpi, rect=None):
    """Writes fig as NAME.png (laid out tightly within rect, default the whole figure) and the plotted rows as
    NAME.csv; returns both paths."""
    fig.tight_layout(rect=rect)
    png, table = os.path.join(out_dir, name + ".png"), os.path.join(out_dir, name + ".csv")
    fig.savefig(png, dpi=dpi)
    plt.close(fig)
    write_csv(table, header, rows)
    return [png, table]


def print_written(prog, write):
    """Prints each path write() returns; an error in the inputs is one line on stderr and exit status 2."""
    try:
        for path in write():
            print(path)
    except (ValueError, OSError, KeyError) as e:
        print("%s: %s" % (prog, e), file=sys.stderr)
        return 2
    return 0
