// Where the widget manager (embed-amd.js) finds its icon fonts: in html-manager/ beside this file.
// Its bundle asks for them next to its module's URL, "@jupyter-widgets/html-manager/dist/", which
// require.js otherwise places beside the page. Loaded after require.js, before embed-amd.js.
// Written for placement_edu (placement_edu/course/site.py), not taken from npm.
require.config({
  paths: {
    "@jupyter-widgets/html-manager/dist": document.currentScript.src.replace(/[^/]*$/, "") +
      "html-manager",
  },
});
