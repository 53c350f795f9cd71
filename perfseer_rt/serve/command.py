"""``perfseer-rt serve`` (placeholder replaced below)."""
import click


@click.command()
def serve():
    """Run the HTTP service."""
