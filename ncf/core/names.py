"""Names shared by the ETL, training and serving: defined here once.

Every column, tensor and Triton input/output name used across stages comes from this module, so
the ETL's parquet columns, the training loader and the Triton ``config.pbtxt`` files cannot drift
apart (a test parses every config and checks it against these names).
"""

# Raw input columns (ML-20m ``ratings.csv`` header; ML-1M ``ratings.dat`` is mapped onto them).
RAW_USER = "userId"
RAW_ITEM = "movieId"
RAW_RATING = "rating"
RAW_TIME = "timestamp"
RAW_COLUMNS = (RAW_USER, RAW_ITEM, RAW_RATING, RAW_TIME)

# Model-id columns written by the ETL (int64 Categorify codes) and read by training.
USER = "user_id"
ITEM = "item_id"

# ETL output layout inside its directory.
TRAIN_DIR = "train"
TEST_DIR = "test"
NEGATIVES_DIR = "negatives"
VALID_DIR = "valid"  # validation split (`ncf etl --holdout valid,test`), columns as test/
VALID_NEGATIVES_DIR = "valid_negatives"  # its evaluation negatives, as negatives/
COLD_USERS_DIR = "cold_users"  # `ncf etl --cold-users`: held-out users' ratings (raw ids, time)
WORKFLOW_DIR = "workflow"
METADATA_FILE = "metadata.json"
SCHEMA_FILE = ".merlin/schema.json"  # each dataset's Merlin schema (tags, id domains)
CONFIG_FILE = "config.json"  # the resolved config of the command that wrote a directory

# Triton tensors. Model-id inputs carry the same names as the parquet columns.
INPUT_USER = USER  # INT64 [batch, 1]
INPUT_ITEM = ITEM  # INT64 [batch, 1]
OUTPUT_SCORE = "score"  # FP32 [batch, 1], sigmoid probability
INPUT_RAW_USER = RAW_USER  # INT64 [batch, 1], raw MovieLens id
INPUT_RAW_ITEM = RAW_ITEM  # INT64 [batch, 1], raw MovieLens id
OUTPUT_KNOWN = "known"  # BOOL [batch, 1], False where a raw id is not in the vocabulary
INPUT_K = "k"  # INT64 [B, 1], number of recommendations per user
INPUT_EXCLUDE = "exclude"  # INT64 [B, E], optional: raw movieIds never to recommend, -1 = padding
INPUT_INCLUDE_RATED = "include_rated"  # BOOL [B, 1], optional: allow the user's rated items
INPUT_HISTORY = "history"  # INT64 [B, H], optional: raw movieIds a user outside the vocabulary
# rated, -1 = padding; such a user is scored by the model from them (serving/foldin.py)
OUTPUT_RAW_ITEMS = "movie_ids"  # INT64 [B, max k], raw movieIds best first, -1 = padding
OUTPUT_SCORES = "scores"  # FP32 [B, max k], NaN = padding
OUTPUT_EXPORT_ID = "export_id"  # INT64 [B, 1], the `ncf export` (manifest export_id) that answered
INPUT_ITEM_IDS = "item_ids"  # INT64 [B, N], optional: score only these item model ids
OUTPUT_ITEM_SCORES = "item_scores"  # FP32 [B, C] (every catalogue item) or [B, N] (item_ids)

# Triton model names in triton_repo/.
MODEL_NEUMF = "neumf"
MODEL_NEUMF_LIBTORCH = "neumf_libtorch"
MODEL_NEUMF_ONNX = "neumf_onnx"
MODEL_WORKFLOW = "workflow"
MODEL_ENSEMBLE = "ncf"
MODEL_RECOMMEND = "recommend"
MODEL_CATALOGUE = "neumf_catalogue"  # recommend's scorer: one user x every item
MODEL_CATALOGUE_LIBTORCH = "neumf_catalogue_libtorch"
# Models the python-backend-only CPU server can load.
CPU_MODELS = (MODEL_WORKFLOW, MODEL_NEUMF, MODEL_CATALOGUE, MODEL_ENSEMBLE, MODEL_RECOMMEND)
# Their twins on Triton's official backends (NGC tritonserver only).
OFFICIAL_BACKEND_MODELS = (MODEL_NEUMF_LIBTORCH, MODEL_NEUMF_ONNX, MODEL_CATALOGUE_LIBTORCH)
# merlin-systems' executor model, in its own repository (`ncf export --with merlin-systems`), not
# triton_repo/ (whose models are the MODEL_* names): raw userId, movieId [B] in the Workflow's
# input dtype -> score FP32 [B].
MERLIN_MODEL = "merlin_ncf"

# Export artifacts (written into triton_repo/<model>/1/ by `ncf export`, never committed).
ARTIFACT_TORCHSCRIPT = "model.pt"
ARTIFACT_ONNX = "model.onnx"
ARTIFACT_CATALOGUE = "catalogue.pt"  # TorchScript of serving/catalogue.py
ARTIFACT_VOCAB = "vocab.npz"  # raw->model id tables for the workflow/recommend models
ARTIFACT_SEEN = "seen.npz"  # per-user training items (CSR) for `recommend` to exclude
ARTIFACT_POPULARITY = "popularity.npz"  # training-split item ranking for users outside the vocab
ARTIFACT_GMF = "gmf.npz"  # GMF user/item vectors: `recommend`'s candidate index (two-stage mode)
ARTIFACT_FOLDIN = "foldin.pt"  # TorchScript of serving/foldin.py: `recommend`'s cold start
MANIFEST_FILE = "manifest.json"
# Committed once at the top of triton_repo/, copied by `ncf export` beside every python model.py.
PYTHON_MODEL_HELPER = "artifact_check.py"

# `--grad-compression` choices: what DDP all-reduces (models/comm.py); bench/train.py, which must
# not import torch, offers the same.
GRAD_COMPRESSIONS = ("none", "fp16", "bf16")
