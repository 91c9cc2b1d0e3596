"""`python -m prm_synth.cli`: the same as the `prm-synth` command."""

from prm_synth.cli import main

if __name__ == "__main__":
    main()
