"""Determined 0.38's DeepSpeed Trainer API, in the form of its examples/deepspeed/dcgan/trainer.py:
started by `python3 -m determined.launch.deepspeed python3 ds_trainer_script.py`."""

import logging

import determined as det
import ds_trial
from determined import pytorch
from determined.pytorch import deepspeed as det_ds


def main():
    info = det.get_cluster_info()
    with det_ds.init() as train_context:
        trial = ds_trial.RegressionTrial(train_context)
        trainer = det_ds.Trainer(trial, train_context)
        trainer.fit(
            max_length=pytorch.Batch(info.trial.hparams["batches"]),
            validation_period=pytorch.Batch(4),
            checkpoint_period=pytorch.Batch(4),
            reporting_period=pytorch.Batch(2),
            latest_checkpoint=info.latest_checkpoint,
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    main()
