"""Judging a trained model's samples.

- `evaluate_model`, `evaluate_saved_model`: FID / KID against a dataset
  (what `scripts/evaluate.py` runs).
- `keras_diffusion.evaluation.folder_quality`: an image-folder model judged
  against held-out images, so that real images score about 1.
- `keras_diffusion.evaluation.digits_quality`: a digits model judged at the
  data's 8x8 (needs scikit-learn).
"""

from keras_diffusion.evaluation.evaluate import (
    FEATURE_EXTRACTORS,
    build_feature_extractor,
    evaluate_model,
    evaluate_saved_model,
    real_image_batches,
)

__all__ = [
    "FEATURE_EXTRACTORS",
    "build_feature_extractor",
    "evaluate_model",
    "evaluate_saved_model",
    "real_image_batches",
]
