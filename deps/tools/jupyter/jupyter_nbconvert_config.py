"""nbconvert's configuration in every run (JUPYTER_CONFIG_PATH, layout.py), for
`jupyter nbconvert --to pdf` as a model types it. nbconvert's PDF goes through xelatex,
and no TeX is installed (docs/environment.md "Notebooks"), so here `--to pdf` is the HTML
export, plots and tables included, made into a PDF by WeasyPrint, as `pandoc -o x.pdf` is.
Every other format is nbconvert's own. nbconvert reads this file as it starts, before it
chooses the exporter that `--to` names."""

from nbconvert import nbconvertapp
from nbconvert.exporters import HTMLExporter
from traitlets import default


class WeasyPrintPDFExporter(HTMLExporter):
    """The HTML of nbconvert's print template (the one its own web PDF uses), as a PDF."""

    export_from_notebook = "PDF via HTML"
    output_mimetype = "application/pdf"

    @default("file_extension")
    def _file_extension_default(self):
        return ".pdf"

    @default("template_name")
    def _template_name_default(self):
        return "webpdf"

    def from_notebook_node(self, nb, resources=None, **kw):
        from weasyprint import HTML

        html, resources = super().from_notebook_node(nb, resources=resources, **kw)
        # Relative links (a markdown cell's image) resolve beside the notebook.
        base = resources.get("metadata", {}).get("path") or "."
        resources["output_extension"] = ".pdf"
        return HTML(string=html, base_url=f"{base}/").write_pdf(), resources


def _get_exporter(name, config=None, *, nbconvert_own=nbconvertapp.get_exporter):
    return WeasyPrintPDFExporter if name.lower() == "pdf" else nbconvert_own(name, config=config)


nbconvertapp.get_exporter = _get_exporter
