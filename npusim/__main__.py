"""``python -m npusim``: the same command line as the ``npusim`` script."""

from npusim.cli import main

if __name__ == "__main__":
    main()
