"""Starting, watching and ending the ranks: the launcher, the agent, the forkserver and the warm
pool, each run's folder, its progress, and what this container allows."""
