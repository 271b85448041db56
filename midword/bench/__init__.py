"""Headless benchmarks (``midword bench humaneval|charlm|overhead``).

See :mod:`midword.bench.command` for the command line, :mod:`midword.bench.sandbox`
for how generated code is executed, and :mod:`midword.bench.data` for where data
is looked up. Importing this package imports neither torch nor transformers.
"""
