"""The main job end to end on the bundled sample, from one command: text to a served model, and a
report of what the pretraining bought, sized to this machine.

    python -m albert_tf.demo                      # or: albert-demo   (15 minutes of its own time)
    python -m albert_tf.demo --budget_minutes 60  # the same job, a larger pretraining run
    python -m albert_tf.demo --smoke              # the same steps, tiny sizes (CI runs it)

Every step runs the real command a user runs on their own data (each is printed, logged and
listed in the report, so any one can be scaled up by hand):

 1. corpus        `albert_tf.data.prepare_corpus`: five public-domain novels (one document
                  per chapter) and WikiText-2 test (one per article); every 4th document held out;
 2. vocab         `albert_tf.data.train_vocab`: a SentencePiece vocabulary of the
                  training documents;
 3. data          `albert_tf.data.create_pretraining_data`: n-gram-masked MLM +
                  sentence-order TFRecords (40% masking) and the held-out records (15%
                  masking, the usual evaluation; sentence-order pairs from one document each,
                  so their labels are balanced);
 4. finetune_random  `albert_tf.run_classifier`: SST-2 with few labels from random weights, one
                  run per seed (the baseline arm; it also tells the sizing what fine-tuning costs);
 5. size          a short `albert_tf.run_pretraining` probe times this machine's steps; the
                  pretraining step count that fits the rest of the budget is written to
                  RUN_DIR/size/sizing.json (and kept: a rerun resumes the same schedule);
 6. pretrain      `albert_tf.run_pretraining`: a small ALBERT with LAMB, evaluated on the held-out
                  records along the way;
 7. finetune_pretrained  the same fine-tunings from the pretrained model; seed 1's model is
                  exported as a SavedModel on raw text;
 8. export        `albert_tf.export.export_saved_model`: the pretrained model as a
                  fill-mask SavedModel;
 9. serve         `albert_tf.export.cc_loader`: both SavedModels loaded as TF Serving loads
                  them (C++ `LoadSavedModel` + `Session::Run`; `tf.saved_model.load` without g++),
                  answering raw-text requests;
10. fill_mask     `albert_tf.analysis.fill_mask`: the fill-mask answers of the pretrained model
                  beside those of its random initialisation;
11. analysis      `albert_tf.analysis.transitions`: the paper's Figure 2 for the pretrained model;
12. report        RUN_DIR/report.md, report.html and results.json: every figure beside its
                  baseline, the compute spent, each step's time and commands, charts.

Outputs go to `runs/<timestamp>/`. Running the command again resumes the newest run of the same
settings: a command whose last artefact exists is skipped (training resumes from its last
checkpoint), so it never starts over; `--new` starts a fresh run.
"""

from albert_tf.demo.app import STEPS, Job, Step, cli, main, run_demo  # noqa: F401
from albert_tf.demo.commands import (classifier_args, corpus_commands, corpus_paths,  # noqa: F401
                                     finetune_commands, heldout_commands, predictions_for,
                                     pretrain_args, train_records_command, vocab_commands)
from albert_tf.demo.results import gain_verdict, mean_std  # noqa: F401
from albert_tf.demo.settings import (FILL_MASK_REQUESTS, SAMPLE_DIR, SENTIMENT_REQUESTS,  # noqa: F401
                                     SETTINGS)
from albert_tf.demo.sizing import choose_steps  # noqa: F401
