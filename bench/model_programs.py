"""Programs as models write them for a code interpreter, by the library they exercise: the
calls `versions_bench.py` runs on two versions of that library to decide a hold (the rule in
docs/libraries.md "Versions"). Each is short and self-contained, writes nothing, and ends
by printing; one that raises has failed. They use the idioms models write today, old or
new, not the ones a library's newest documentation recommends.
"""

from __future__ import annotations

POLARS_DATA = """
import polars as pl
df = pl.DataFrame({
    "region": ["north", "south", "north", "east", "south", "east", "north", "south"],
    "product": ["a", "b", "a", "c", "b", "a", "c", "a"],
    "sales": [120.0, 80.5, 95.0, 60.0, 130.0, 75.5, 88.0, 99.0],
    "units": [3, 2, 4, 1, 5, 2, 3, 4],
    "date": ["2024-01-05", "2024-01-20", "2024-02-03", "2024-02-14",
             "2024-03-01", "2024-03-09", "2024-03-22", "2024-04-02"],
})
"""

POLARS = {
    "group_by_agg": (
        "print(df.group_by('region').agg(pl.col('sales').sum().alias('total')).sort('total', descending=True))"
    ),
    "count_rows_per_group": "print(df.group_by('region').agg(pl.count()).sort('region'))",
    "len_per_group": "print(df.group_by('region').agg(pl.len()).sort('region'))",
    "numeric_dtypes": "print(df.select([c for c, t in df.schema.items() if t in pl.NUMERIC_DTYPES]).mean())",
    "selectors_numeric": "import polars.selectors as cs\nprint(df.select(cs.numeric()).mean())",
    "pivot_columns": (
        "print(df.pivot(index='region', columns='product', values='sales', aggregate_function='sum').fill_null(0))"
    ),
    "pivot_on": "print(df.pivot(on='product', index='region', values='sales', aggregate_function='sum'))",
    "rolling_mean_min_periods": (
        "print(df.with_columns(pl.col('sales').rolling_mean(window_size=3, min_periods=1).alias('avg')))"
    ),
    "rolling_mean": "print(df.with_columns(pl.col('sales').rolling_mean(window_size=3).alias('avg')))",
    "when_then": (
        "print(df.with_columns(pl.when(pl.col('sales') > 90).then(pl.lit('high')).otherwise(pl.lit('low'))"
        ".alias('band')))"
    ),
    "join_left": (
        "targets = pl.DataFrame({'region': ['north', 'south'], 'target': [300, 250]})\n"
        "print(df.join(targets, on='region', how='left'))"
    ),
    "lazy_filter": "print(df.lazy().filter(pl.col('units') >= 3).select(['region', 'sales']).collect())",
    "str_ops": (
        "print(df.filter(pl.col('region').str.contains('th')).with_columns(pl.col('product').str.to_uppercase()))"
    ),
    "dates": (
        "d = df.with_columns(pl.col('date').str.strptime(pl.Date, '%Y-%m-%d'))\n"
        "print(d.group_by(pl.col('date').dt.month().alias('month')).agg(pl.col('sales').sum()).sort('month'))"
    ),
    "group_by_dynamic": (
        "d = df.with_columns(pl.col('date').str.to_date()).sort('date')\n"
        "print(d.group_by_dynamic('date', every='1mo').agg(pl.col('sales').sum()))"
    ),
    "to_pandas": "print(df.to_pandas().describe())",
    "describe": "print(df.describe())",
    "melt": "print(df.melt(id_vars=['region'], value_vars=['sales', 'units']).head())",
    "unpivot": "print(df.unpivot(index=['region'], on=['sales', 'units']).head())",
    "with_row_count": "print(df.with_row_count('n').head(3))",
    "with_row_index": "print(df.with_row_index('n').head(3))",
    "value_counts": "print(df['region'].value_counts(sort=True))",
    "is_in": "print(df.filter(pl.col('product').is_in(['a', 'b'])).height)",
    "map_elements": "print(df.with_columns(pl.col('sales').map_elements(lambda x: round(x), return_dtype=pl.Int64)))",
    "cum_sum": "print(df.with_columns(pl.col('sales').cum_sum().alias('running')))",
    "concat": "print(pl.concat([df.head(2), df.tail(2)]))",
    "null_count": "print(df.null_count(), df.shape, df.columns)",
    "over_window": "print(df.with_columns((pl.col('sales') / pl.col('sales').sum().over('region')).alias('share')))",
    "parquet_roundtrip": (
        "import io\nbuf = io.BytesIO()\ndf.write_parquet(buf)\nbuf.seek(0)\nprint(pl.read_parquet(buf).shape)"
    ),
    "csv_roundtrip": "import io\nprint(pl.read_csv(io.StringIO(df.write_csv())).schema)",
}

SCIPY_DATA = """
import numpy as np
import pandas as pd
from scipy import signal, stats, optimize, interpolate, integrate
rng = np.random.default_rng(0)
t = np.arange(1024) / 100.0
df = pd.DataFrame({"t": t, "x": np.sin(2 * np.pi * 5 * t) + rng.normal(0, 0.3, t.size),
                   "y": np.cos(2 * np.pi * 5 * t) + rng.normal(0, 0.3, t.size)})
"""

SCIPY = {
    "welch_series": "f, p = signal.welch(df['x'], fs=100)\nprint(f[np.argmax(p)])",
    "csd_series": "f, p = signal.csd(df['x'], df['y'], fs=100)\nprint(f[np.argmax(np.abs(p))])",
    "welch_values": "f, p = signal.welch(df['x'].values, fs=100)\nprint(f[np.argmax(p)])",
    "find_peaks_series": "peaks, _ = signal.find_peaks(df['x'], height=1)\nprint(len(peaks))",
    "savgol_series": "print(signal.savgol_filter(df['x'], 11, 3)[:3])",
    "butter_filtfilt": "b, a = signal.butter(4, 10, fs=100)\nprint(signal.filtfilt(b, a, df['x'])[:3])",
    "ttest_ind": "print(stats.ttest_ind(df['x'], df['y']))",
    "pearsonr": "print(stats.pearsonr(df['x'], df['y']))",
    "linregress": "print(stats.linregress(df['t'], df['x']).slope)",
    "norm_fit": "print(stats.norm.fit(df['x']))",
    "curve_fit": (
        "popt, _ = optimize.curve_fit(lambda t, a, f: a * np.sin(2 * np.pi * f * t), df['t'], df['x'], p0=[1, 5])\n"
        "print(popt)"
    ),
    "minimize": "print(optimize.minimize(lambda v: (v[0] - 3) ** 2 + (v[1] + 1) ** 2, [0, 0]).x)",
    "interp1d": "print(interpolate.interp1d(df['t'], df['x'])(1.234))",
    "trapezoid": "print(integrate.trapezoid(df['x'], df['t']))",
    "simpson": "print(integrate.simpson(df['x'], x=df['t']))",
    "quad": "print(integrate.quad(lambda v: v ** 2, 0, 3)[0])",
    "chi2_contingency": "print(stats.chi2_contingency([[10, 20], [30, 40]])[1])",
    "mannwhitneyu": "print(stats.mannwhitneyu(df['x'], df['y']).pvalue)",
}

PROGRAMS = {"polars": (POLARS_DATA, POLARS), "scipy": (SCIPY_DATA, SCIPY)}
