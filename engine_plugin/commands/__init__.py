"""The ``engine-plugin`` subcommands (``bake`` lives in :mod:`engine_plugin.bake.command`).

Each module adds its parser (``add_parser(sub, common)``) and runs with ``(args, reporter)``,
answering the exit status; :mod:`.contract` holds what every subcommand keeps.
"""
