"""``python -m bot`` is ``exportbot``."""

from bot.cli.main import main

main()
