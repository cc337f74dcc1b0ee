"""``python -m bot`` is ``exportbot``."""

from bot.cli import main

main()
