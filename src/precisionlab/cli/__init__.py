"""Thin command line: one module per noun, each defining `COMMAND` (a click command or group).

Commands turn ValueError / TypeError / OSError into a one-line message and exit code 2.
"""
