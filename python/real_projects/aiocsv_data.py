"""Writes the CSV files that aiocsv's tests read, which its sdist lacks,
from the values those tests expect, with the standard ``csv`` module in the
dialect each test reads them with (its write tests compare aiocsv's output
with these files: aiocsv's writer must write what ``csv`` writes).

Run in the unpacked tree, beside its ``tests`` directory."""

import csv
import importlib
import sys

sys.path.insert(0, "tests")


def write(path, rows, **dialect):
    with open(path, "w", encoding="ascii", newline="") as f:
        csv.writer(f, **dialect).writerows(rows)


simple = importlib.import_module("test_simple")
write(simple.FILENAME, simple.VALUES)

dialects = importlib.import_module("test_dialects")
write(dialects.FILENAME, dialects.VALUES, dialect=dialects.DIALECT)

newlines = importlib.import_module("test_newlines")
write(newlines.FILENAME, [newlines.HEADER] + newlines.READ_VALUES, **newlines.DIALECT_PARAMS)

dicts = importlib.import_module("test_dict")
with open(dicts.FILENAME, "w", encoding="ascii", newline="") as f:
    writer = csv.DictWriter(f, dicts.HEADER, **dicts.DIALECT_PARAMS)
    writer.writeheader()
    writer.writerows(dicts.VALUES)
