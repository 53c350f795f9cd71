"""``python -m training.dataset``: the first builder's command line, kept as an
alias of ``python -m training.campaign`` (``--target N`` is ``--configs N``,
``--kind train`` is ``--target cpu-train``)."""

import sys

from training.campaign.cli import main


def translate(argv: list[str]) -> list[str]:
    """The old arguments as the campaign's."""
    out, kind = [], "inference"
    it = iter(argv)
    for arg in it:
        name, eq, value = arg.partition("=")
        if name in ("--target", "--kind"):
            value = value if eq else next(it, "")
            if name == "--target":
                out += ["--configs", value]
            else:
                kind = value
        else:
            out.append(arg)
    return ["--target", "cpu-train" if kind == "train" else "cpu-inference", *out]


if __name__ == "__main__":
    sys.exit(main(translate(sys.argv[1:])))
