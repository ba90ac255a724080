"""`nmt` and `python -m nmt`: tcmalloc first (nmt/allocator.py), then the command line."""

from nmt.allocator import restart_with_tcmalloc


def main() -> None:
    restart_with_tcmalloc()  # before the command line's imports, which a restart would repeat
    from nmt.cli import app

    app()


if __name__ == "__main__":
    main()
