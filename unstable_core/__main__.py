"""`python -m unstable_core`: the `unstable` command line, for environments without the console script."""

from unstable_core.cli.main import main

if __name__ == "__main__":
    main()
