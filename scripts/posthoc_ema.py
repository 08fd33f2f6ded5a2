"""Choose a run's EMA length after training (post-hoc EMA, EDM2): the model of
any EMA width from the snapshots of a `train.py --posthoc-ema` run.

    python scripts/train.py --posthoc-ema
    python scripts/posthoc_ema.py runs/digits --sigma-rel 0.08
    python scripts/posthoc_ema.py runs/digits --sweep
    python scripts/posthoc_ema.py runs/emoji --sweep --judge-folder heldout/

`--sigma-rel X` writes the model whose EMA has relative width X (the EMA's
standard deviation over the run's length; the run tracked 0.05 and 0.1, and
any width from about 0.01 to 0.25 is reconstructed from their snapshots) and
prints the reconstruction's error (the relative L2 distance between the
weights it gives the run's updates and the wanted ones), with a warning
above 0.05: on 16 snapshots, widths below about 0.03 or above 0.23.
`--sweep` judges 11 widths from 0.01 to 0.25 (or `--sigma-rels`) and the
run's own EMA with the run's judge (the digits' FD/floor, or that of the
held-out folder of `--judge-folder`), writes `posthoc_ema.csv` and
`posthoc_ema.png` in the run folder, and saves the best model. The model
goes to `--out`, by default `posthoc_ema.keras` in the run folder; it
samples like any other (`scripts/sample.py`, `scripts/evaluate.py`).
"""

import os
import sys

# Run from a checkout, use its package rather than an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _startup

# Nothing here imports TensorFlow before the flags are parsed.
import _startup  # noqa: E402

_startup.quiet_environment()


def build_parser():
    parser = _startup.new_parser(__doc__)
    parser.add_argument("run", help="the run folder of train.py --posthoc-ema")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--sigma-rel",
        type=float,
        metavar="X",
        help="the EMA's relative width, in (0, 0.28)",
    )
    mode.add_argument(
        "--sweep",
        action="store_true",
        help="judge a range of widths and the run's EMA; keep the best",
    )
    parser.add_argument(
        "--sigma-rels",
        type=_startup.comma_list(float, "widths such as 0.02,0.05,0.1"),
        help="--sweep: the widths (default: 11 from 0.01 to 0.25)",
    )
    parser.add_argument(
        "--judge-folder",
        metavar="DIR",
        help="--sweep: held-out images to judge against (needed but for a digits run)",
    )
    parser.add_argument(
        "--num-samples",
        type=lambda text: _startup.at_least(text, 2),
        help="--sweep: images a judgement (default: 500 for the digits, half "
        "the --judge-folder)",
    )
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="the .keras model to write (default: RUN/posthoc_ema.keras)",
    )
    _startup.add_import_flag(parser)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.sweep and (args.sigma_rels or args.judge_folder or args.num_samples):
        parser.error("--sigma-rels, --judge-folder and --num-samples go with --sweep")
    _startup.import_tensorflow()
    from keras_diffusion.run import cli, posthoc

    try:
        cli.import_modules(args.imports)
        if args.sweep:
            result = posthoc.sweep(
                args.run,
                args.sigma_rels,
                args.judge_folder,
                out=args.out,
                num_samples=args.num_samples,
            )
            print(f"  curve: {result.csv_path}\n  plot:  {result.plot_path}")
            print(f"  model: {result.model_path}")
            return 0
        out, error = posthoc.write(args.run, args.sigma_rel, args.out)
    except (ValueError, TypeError, OSError) as error:
        if not cli.is_user_error(error):
            raise
        flags = cli.flag_names(parser, run_folder="RUN", sigma_rel="--sigma-rel")
        return cli.report_error(error, flags=flags)
    print(f"The model with the EMA of sigma_rel {args.sigma_rel:g}: {out}")
    print(
        f"  the reconstruction's error: {error:.3f} (0: exact; a warning above "
        f"{posthoc.LARGE_ERROR:g})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(_startup.run(main))
