# The Jupyter server's settings for the course, wherever it runs: ``placement-edu course`` starts
# JupyterLab with them (``--config`` this file), and Binder's ``binder/postBuild`` copies this file
# to ~/.jupyter/jupyter_server_config.py (``jupyter lab --config PATH`` of this file works too).
#
# Binder gives a learner 1-2 GiB for everything, and JupyterLab keeps each notebook's kernel
# running when the learner moves on to the next one: an idle kernel holds 90-280 MiB (280 once it
# has imported torch), so a walk through the notebooks would pass 2 GiB with every kernel left
# open. The server shuts down a kernel that has been idle for 10 minutes -- even while its tab is
# still open (cull_connected), since that is how a learner leaves one -- and never a busy one.
# Reopening the notebook and running it again starts a new kernel. (A warm pool of ranks closes
# itself after 5 minutes without a run: placement_edu.runtime.processes.pool.IDLE_S.)
c = get_config()  # type: ignore[name-defined]  # noqa: F821 -- Jupyter defines it for this file

c.MappingKernelManager.cull_idle_timeout = 600  # seconds idle before a kernel is shut down
c.MappingKernelManager.cull_interval = 60  # seconds between checks
c.MappingKernelManager.cull_connected = True  # an open tab does not keep an idle kernel alive
c.MappingKernelManager.cull_busy = False  # a cell still running is never interrupted
