"""How midword's default model is trained: the steps of ``models/train_default.py``.

The script (its command line) runs these modules in order; each holds one step:

* ``corpus``: the standard library's files, filtered, split into training and held out;
* ``tokenizer``: byte-level BPE trained on the training files;
* ``fim``: the training documents, with fill-in-the-middle examples drawn per epoch;
* ``batches``: seeded batches of random chunks of those documents;
* ``model``: the small Llama, its optimizer and learning-rate schedule (``recipe``: the
  settings that determine the model);
* ``loop``: the training loop within a wall-clock budget (``progress``: its log lines);
* ``evaluation``: bits per byte on held-out files, with sliding windows;
* ``output``, ``card``: the model directory and its model card.

This folder is not part of the installed package: the script puts ``models/`` on
``sys.path`` and imports ``training`` from there.
"""
