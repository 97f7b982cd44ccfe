"""Publishing a run folder to the Hugging Face Hub with its dataset card.

* `hub` - the dataset repo: its layout, the card, the one commit that publishes a run,
  `HubPublishError` and the command that retries it;
* `publish_run` - publishing one run: which files go up, each as its train and test rows,
  with the card's facts (`publish_run_dir`: a run folder as it is; `publish_configured`:
  as the run config's `publish:` says).
"""
