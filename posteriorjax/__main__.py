"""`python -m posteriorjax <command> [flags]`: the `posteriorjax` console command (`posteriorjax.cli`)."""

from posteriorjax import cli

if __name__ == "__main__":
    cli.main()
