"""``python -m tidelake.cli``: the same as the ``tidelake`` command."""

from tidelake.cli import main

main()
