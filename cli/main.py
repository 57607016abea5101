import click
@click.group()
def main() -> None:
    """aos"""
