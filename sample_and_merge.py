#!/usr/bin/env python
"""The in-the-wild protocol in one command: ``python sample_and_merge.py --base qwen3-4b``.

A thin wrapper over ``wildmerge sample``; with no arguments it runs on the embedded demo family.
"""

import sys

from wildmerge.cli import main

if __name__ == "__main__":
    sys.exit(main(["sample", *sys.argv[1:]]))
