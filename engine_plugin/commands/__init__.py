"""The ``engine-plugin`` subcommands, one module each (``bake`` runs :mod:`engine_plugin.bake`).

Each module adds its parser (``add_parser(sub, common)``) and runs with ``(args, reporter)``,
answering the exit status; :mod:`.contract` holds what every subcommand keeps.
"""
