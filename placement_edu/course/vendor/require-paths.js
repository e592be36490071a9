// Where the widget manager (embed-amd.js) finds its icon fonts: in html-manager/ beside this file.
// Each module it bundles (@jupyter-widgets/base, controls, html-manager...) asks for them beside
// its own module URL, which require.js would otherwise place in a folder beside the page.
// Loaded after require.js, before embed-amd.js. Written for placement_edu/course/site.py.
(function () {
  var fonts = document.currentScript.src.replace(/[^/]*$/, "") + "html-manager";
  require.config({
    paths: {
      "@jupyter-widgets": fonts,
      "@jupyter-widgets/html-manager/dist": fonts,
    },
  });
})();
