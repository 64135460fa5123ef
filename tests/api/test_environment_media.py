"""Video, audio and notebooks, as users ask for them (docs/environment.md): each checked on
what it produced, read by the format's own structure (tests/helpers/media.py), not by the
tools that made it."""

from __future__ import annotations

import base64
import json
import struct

import pytest
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.settings import Settings

from ..calls import names, run
from ..conftest import API_KEY
from ..helpers.media import gif_frames, mp3_frames, mp4_box, mp4_boxes, mp4_video_frames
from ..serving import Services


@pytest.fixture
def client(settings: Settings, services: Services) -> TestClient:
    # A Jupyter kernel and ffmpeg start in seconds alone; a shared CI machine needs room.
    roomy = settings.model_copy(update={"run_timeout_seconds": 90})
    return TestClient(create_app(services(roomy)), headers={"X-API-Key": API_KEY})


def _download(client: TestClient, body: dict, name: str) -> bytes:
    ref = next(f for f in body["files"] if f["name"] == name)
    reply = client.get(f"/v1/download/{body['session_id']}/{ref['id']}")
    assert reply.status_code == 200
    return reply.content


ANIMATION = """
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.animation import FFMpegWriter, FuncAnimation
fig, ax = plt.subplots(figsize=(4, 3))
x = np.linspace(0, 2 * np.pi, 200)
line, = ax.plot(x, np.sin(x))
animation = FuncAnimation(fig, lambda i: line.set_ydata(np.sin(x + i / 4)), frames=24)
animation.save("wave.mp4", writer=FFMpegWriter(fps=12))
print("saved")
"""


def test_a_matplotlib_animation_becomes_an_mp4_then_a_gif(client: TestClient) -> None:
    made = run(client, ANIMATION)
    assert (made["stdout"], made["stderr"], names(made)) == ("saved\n", "", ["wave.mp4"])
    mp4 = _download(client, made, "wave.mp4")
    assert [kind for kind, _ in mp4_boxes(mp4)][:1] == ["ftyp"]
    assert {"moov", "mdat"} <= {kind for kind, _ in mp4_boxes(mp4)}
    assert mp4_box(mp4, "ftyp")[:4] == b"isom"
    assert mp4_video_frames(mp4) == 24

    # As typed at a prompt: half the frame rate, so half the frames.
    gif = run(client, "ffmpeg -loglevel error -i wave.mp4 -vf fps=6 wave.gif && echo done", "bash",
              session_id=made["session_id"])  # fmt: skip
    assert (gif["stdout"], gif["stderr"], names(gif)) == ("done\n", "", ["wave.gif"])
    assert gif_frames(_download(client, gif, "wave.gif")) == 12


AUDIO = """
from pydub import AudioSegment
from pydub.generators import Sine
tone = Sine(440).to_audio_segment(duration=2000).set_frame_rate(44100)
tone.export("tone.mp3", format="mp3", bitrate="128k")
trimmed = AudioSegment.from_mp3("tone.mp3")[:1000].fade_out(200)
trimmed.export("trimmed.wav", format="wav")
print(len(trimmed))
"""


def test_pydub_writes_an_mp3_and_trims_it(client: TestClient) -> None:
    made = run(client, AUDIO)
    assert (made["stdout"], made["stderr"]) == ("1000\n", "")
    assert sorted(names(made)) == ["tone.mp3", "trimmed.wav"]
    frames = mp3_frames(_download(client, made, "tone.mp3"))
    # 2 s of 1152-sample frames at 44.1 kHz is 77, with the encoder's delay and padding and
    # its Xing/Info frame a few more; every audio frame at the asked bitrate.
    assert 77 <= len(frames) <= 82, len(frames)
    assert {rate for _, rate in frames} == {44100}
    assert [kbps for kbps, _ in frames[1:]].count(128) == len(frames) - 1
    wav = _download(client, made, "trimmed.wav")
    assert wav[:4] == b"RIFF" and wav[8:12] == b"WAVE"
    channels, rate = struct.unpack("<HI", wav[22:28])
    assert (channels, rate) == (1, 44100)


NOTEBOOK = """
import nbformat
from nbclient import NotebookClient
nb = nbformat.v4.new_notebook()
plot = "import matplotlib.pyplot as plt\\nplt.plot([1, 3, 2])\\nplt.title('sales')\\nplt.show()"
nb.cells = [nbformat.v4.new_code_cell(plot), nbformat.v4.new_code_cell("print(6 * 7)")]
NotebookClient(nb, timeout=60, kernel_name="python3").execute()
nbformat.write(nb, "analysis.ipynb")
print("executed")
"""


def test_an_executed_notebook_keeps_its_plot(client: TestClient) -> None:
    made = run(client, NOTEBOOK)
    assert made["stdout"] == "executed\n", made["stderr"]
    assert names(made) == ["analysis.ipynb"]
    cells = json.loads(_download(client, made, "analysis.ipynb"))["cells"]
    plot = [out for out in cells[0]["outputs"] if "image/png" in out.get("data", {})]
    assert len(plot) == 1, cells[0]["outputs"]
    png = base64.b64decode(plot[0]["data"]["image/png"])
    width, height = struct.unpack(">II", png[16:24])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and width > 300 and height > 200
    assert "".join(cells[1]["outputs"][0]["text"]) == "42\n"


EXPORTS = """
python - <<'PY'
import nbformat
python3 = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
           "language_info": {"name": "python", "file_extension": ".py"}}
nb = nbformat.v4.new_notebook(metadata=python3)
table = "import pandas as pd\\ndf = pd.DataFrame({'region': ['North', 'South'], 'sales': [1234, 5678]})\\ndf"
plot = "import matplotlib.pyplot as plt\\ndf.plot.bar(x='region', y='sales')\\nplt.title('by region')\\nplt.show()"
nb.cells = [nbformat.v4.new_markdown_cell("# Sales report"), nbformat.v4.new_code_cell(table),
            nbformat.v4.new_code_cell(plot)]
nbformat.write(nb, "analysis.ipynb")
PY
for to in html pdf markdown; do
  jupyter nbconvert --to $to --execute analysis.ipynb 2>/dev/null || echo "$to failed"
done
jupyter nbconvert --to script analysis.ipynb 2>/dev/null || echo "script failed"
pdftotext analysis.pdf - | grep -E '^(Sales report|5678)$'
pdfimages -list analysis.pdf | awk '$3 == "image" {print "pdf image", $4 "x" $5}'
python -c "import nbconvert; print('api', '<html' in nbconvert.HTMLExporter().from_filename('analysis.ipynb')[0])"
"""


def test_notebooks_export_to_html_pdf_markdown_and_script(client: TestClient) -> None:
    # The templates live in the locked set's share/jupyter (JUPYTER_PATH), and `--to pdf`
    # goes through WeasyPrint: no TeX is installed (deps/tools/jupyter).
    body = run(client, EXPORTS, "bash")
    assert body["stdout"].splitlines() == ["Sales report", "5678", "pdf image 561x481", "api True"], body
    made = {"analysis.ipynb", "analysis.html", "analysis.pdf", "analysis.md", "analysis.py"}
    assert set(names(body)) == made | {"analysis_files/analysis_2_0.png"}
    html = _download(client, body, "analysis.html").decode()
    assert "<table" in html and "<td>5678</td>" in html
    png = base64.b64decode(html.split('src="data:image/png;base64,')[1].split('"')[0])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (561, 481)
    assert _download(client, body, "analysis.pdf")[:5] == b"%PDF-"
    markdown = _download(client, body, "analysis.md").decode()
    assert "![png](analysis_files/analysis_2_0.png)" in markdown and "<td>5678</td>" in markdown
    assert "df.plot.bar(x='region', y='sales')" in _download(client, body, "analysis.py").decode()


def test_a_script_still_draws_without_a_display(client: TestClient) -> None:
    code = "import os, matplotlib.pyplot as plt\nprint(os.environ.get('MPLBACKEND'), plt.get_backend().lower())"
    assert run(client, code)["stdout"] == "None agg\n"


def test_ffprobe_reads_what_ffmpeg_wrote(client: TestClient) -> None:
    code = """
ffmpeg -loglevel error -f lavfi -i sine=frequency=1000:duration=1.5 -ar 48000 beep.m4a
ffprobe -v error -show_entries stream=codec_name,sample_rate -show_entries format=duration -of csv=p=0 beep.m4a
"""
    body = run(client, code, "bash")
    assert body["stderr"] == ""
    codec, duration = body["stdout"].split()
    assert codec == "aac,48000" and abs(float(duration) - 1.5) < 0.05
    assert names(body) == ["beep.m4a"]
