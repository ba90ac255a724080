from nmt.cli import app

app()
