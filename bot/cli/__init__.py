"""The command line: ``exportbot`` (``main``) and one module per command, with what every command shares.

Commands: ``main`` (the group, ``export``, ``list-workarounds``), ``audit`` (its tables in ``audit_render``),
``generate``, ``lint``, ``pr``, ``bisect``, ``sweep``, ``workarounds``; ``export_checks`` checks an export's
inputs before any work. Shared: ``options`` (options defined once), ``json_output`` (``--json``),
``progress`` (stderr progress), ``terminal`` (text that fits 80 columns), ``help_examples`` (examples under
``--help``). Nothing outside this package imports it but ``bot.__main__``: the layers below raise
``bot.errors.UsageProblem`` and return records, and this layer prints them.
"""
