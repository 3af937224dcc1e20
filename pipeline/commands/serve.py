"""`baton serve`: TensorFlow Serving's model server flags, our server."""


def main(argv: list[str]) -> int:
    from baton.serving.cli import main as serve_main

    return serve_main(argv)
