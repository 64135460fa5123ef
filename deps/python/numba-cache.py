"""librosa's numba kernels compiled once, at install, into NUMBA_CACHE_DIR (deps/environment.sh
runs this after the Python set is in place, with the set's own path, which the cache is keyed
on). Uncached, a run compiles them again on its first analysis: 15 to 45 s here, against a
30 s run limit. A run copies this cache where numba can write (layout.NUMBA_CACHE) as it
imports numba, and loads what it needs from it (docs/environment.md "librosa").

The calls are those programs make, on float32 (what librosa.load returns) and float64
(what a program's own np.sin makes) alike: numba compiles a kernel per type.
"""

import os
import tempfile

import librosa
import numpy as np
import soundfile

rate = 22050
tone = np.sin(2 * np.pi * 440 * np.arange(2 * rate) / rate)
clicks = librosa.clicks(times=np.arange(0.25, 2, 0.5), sr=rate, length=tone.size)
with tempfile.TemporaryDirectory() as scratch:
    path = os.path.join(scratch, "tone.wav")
    soundfile.write(path, (tone + clicks) / 2, rate)
    loaded, rate = librosa.load(path, sr=None)
for y in (loaded, (tone + clicks) / 2):
    librosa.feature.mfcc(y=y, sr=rate)
    librosa.feature.chroma_stft(y=y, sr=rate)
    librosa.feature.spectral_centroid(y=y, sr=rate)
    librosa.feature.zero_crossing_rate(y)
    librosa.feature.rms(y=y)
    librosa.onset.onset_detect(y=y, sr=rate)
    librosa.beat.beat_track(y=y, sr=rate)
    librosa.yin(y, fmin=80, fmax=1000, sr=rate)
    librosa.pyin(y[:rate], fmin=80, fmax=1000, sr=rate)
    librosa.effects.trim(y)
    librosa.effects.split(y)
    librosa.amplitude_to_db(np.abs(librosa.stft(y)), ref=np.max)
print("numba-cache: librosa's kernels compiled")
