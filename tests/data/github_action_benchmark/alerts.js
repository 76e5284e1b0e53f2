// github-action-benchmark's alert logic, transcribed to plain JavaScript from its TypeScript source at
// https://github.com/benchmark-action/github-action-benchmark, v1.22.0
// (commit c38cce98215cf75e178ecd5a0c1a1ab215e93006): src/canonicalizeUnit.ts, src/normalizeValueByUnit.ts,
// src/extractRangeInfo.ts, src/normalizeBenchmarkResult.ts, src/normalizeBenchmark.ts,
// src/addBenchmarkEntry.ts, and from src/write.ts biggerIsBetter, findAlerts, getRatio and the part of
// writeBenchmark and handleAlert that decides the alerts; from src/config.ts getPercentageInput and the
// fail-threshold default. Types removed, the @actions/core logging calls made no-ops; nothing else changed.
// The driver at the end (not upstream) feeds it a series of runs the way the action is fed one per job.
//
// The MIT License
//
// Copyright (c) 2019 rhysd
//
// Permission is hereby granted, free of charge, to any person obtaining a copy
// of this software and associated documentation files (the "Software"), to deal
// in the Software without restriction, including without limitation the rights
// to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
// of the Software, and to permit persons to whom the Software is furnished to do so,
// subject to the following conditions:
//
// The above copyright notice and this permission notice shall be included in all
// copies or substantial portions of the Software.
//
// THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED,
// INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR
// PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE
// LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT,
// TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR
// THE USE OR OTHER DEALINGS IN THE SOFTWARE.

'use strict';

const core = { debug() {}, warning() {} };

// src/canonicalizeUnit.ts
function canonicalizeUnit(u) {
    return u.trim().toLowerCase().replace(/µs|μs/g, 'us');
}

// src/normalizeValueByUnit.ts
function normalizeValueByUnit(prevUnit, currentUnit, value) {
    const prev = canonicalizeUnit(prevUnit);
    const current = canonicalizeUnit(currentUnit);
    for (const units of SUPPORTED_UNITS) {
        const prevUnitIndex = units.indexOf(prev);
        const currentUnitIndex = units.indexOf(current);

        if (prevUnitIndex >= 0 && currentUnitIndex >= 0) {
            const unitDiff = prevUnitIndex - currentUnitIndex;

            return value * UNIT_CONVERSION_MULTIPLIER ** unitDiff;
        }
    }

    return value;
}

const UNIT_CONVERSION_MULTIPLIER = 1000;
const TIME_UNITS = ['s', 'ms', 'us', 'ns'];
const ITER_UNITS = TIME_UNITS.map((unit) => `${unit}/iter`);
const OPS_PER_TIME_UNIT = [...TIME_UNITS].reverse().map((unit) => `ops/${unit}`);
const SUPPORTED_UNITS = [TIME_UNITS, ITER_UNITS, OPS_PER_TIME_UNIT];

// src/extractRangeInfo.ts
function extractRangeInfo(range) {
    if (!range) {
        return undefined;
    }

    const matches = range.match(/(?<prefix>(\+-|±)\s*)(?<value>\d.*)/);

    if (!matches || !matches.groups) {
        return undefined;
    }

    const valueString = matches.groups.value;

    const value = Number(valueString);

    if (isNaN(value)) {
        return undefined;
    }

    return {
        value,
        prefix: matches.groups.prefix ?? '',
    };
}

// src/normalizeBenchmarkResult.ts
function normalizeBenchmarkResult(prevBenchResult, currentBenchResult) {
    if (!prevBenchResult) {
        return currentBenchResult;
    }

    const prevUnit = prevBenchResult.unit;
    const currentUnit = currentBenchResult.unit;
    const currentRange = currentBenchResult.range;
    const currentRangeInfo = extractRangeInfo(currentRange);

    const normalizedValue = normalizeValueByUnit(prevUnit, currentUnit, currentBenchResult.value);
    const normalizedUnit = currentBenchResult.value !== normalizedValue ? prevUnit : currentUnit;
    const normalizedRangeInfo = currentRangeInfo
        ? {
              prefix: currentRangeInfo.prefix,
              value: normalizeValueByUnit(prevUnit, currentUnit, currentRangeInfo.value),
          }
        : undefined;

    return {
        ...currentBenchResult,
        value: normalizedValue,
        unit: normalizedUnit,
        range: normalizedRangeInfo ? `${normalizedRangeInfo.prefix}${normalizedRangeInfo.value}` : currentRange,
    };
}

// src/normalizeBenchmark.ts
function normalizeBenchmark(prevBench, currentBench) {
    if (!prevBench) {
        return currentBench;
    }

    return {
        ...currentBench,
        benches: currentBench.benches
            .map((currentBenchResult) => ({
                currentBenchResult,
                prevBenchResult: prevBench.benches.find((result) => result.name === currentBenchResult.name),
            }))
            .map(({ currentBenchResult, prevBenchResult }) =>
                normalizeBenchmarkResult(prevBenchResult, currentBenchResult),
            ),
    };
}

// src/addBenchmarkEntry.ts
function addBenchmarkEntry(benchName, benchEntry, entries, maxItems) {
    let prevBench = null;
    let normalizedCurrentBench = benchEntry;

    // Add benchmark result
    if (entries[benchName] === undefined) {
        entries[benchName] = [benchEntry];
        core.debug(`No suite was found for benchmark '${benchName}' in existing data. Created`);
    } else {
        const suites = entries[benchName];
        // Get the last suite which has different commit ID for alert comment
        for (const e of [...suites].reverse()) {
            if (e.commit.id !== benchEntry.commit.id) {
                prevBench = e;
                break;
            }
        }

        normalizedCurrentBench = normalizeBenchmark(prevBench, benchEntry);

        suites.push(normalizedCurrentBench);

        if (maxItems !== null && suites.length > maxItems) {
            suites.splice(0, suites.length - maxItems);
            core.debug(
                `Number of data items for '${benchName}' was truncated to ${maxItems} due to max-items-in-charts`,
            );
        }
    }
    return { prevBench, normalizedCurrentBench };
}

// src/write.ts
function biggerIsBetter(tool) {
    switch (tool) {
        case 'cargo':
            return false;
        case 'go':
            return false;
        case 'benchmarkjs':
            return true;
        case 'benchmarkluau':
            return false;
        case 'pytest':
            return true;
        case 'googlecpp':
            return false;
        case 'catch2':
            return false;
        case 'julia':
            return false;
        case 'jmh':
            return false;
        case 'benchmarkdotnet':
            return false;
        case 'customBiggerIsBetter':
            return true;
        case 'customSmallerIsBetter':
            return false;
    }
}

// src/write.ts
function findAlerts(curSuite, prevSuite, threshold) {
    core.debug(`Comparing current:${curSuite.commit.id} and prev:${prevSuite.commit.id} for alert`);

    const alerts = [];
    for (const current of curSuite.benches) {
        const prev = prevSuite.benches.find((b) => b.name === current.name);
        if (prev === undefined) {
            core.debug(`Skipped because benchmark '${current.name}' is not found in previous benchmarks`);
            continue;
        }

        const ratio = getRatio(curSuite.tool, prev, current);

        if (ratio > threshold) {
            core.warning(
                `Performance alert! Previous value was ${prev.value} and current value is ${current.value}.` +
                    ` It is ${ratio}x worse than previous exceeding a ratio threshold ${threshold}`,
            );
            alerts.push({ current, prev, ratio });
        }
    }

    return alerts;
}

// src/write.ts
function getRatio(tool, prev, current) {
    if (prev.value === 0 && current.value === 0) return 1;

    return biggerIsBetter(tool)
        ? prev.value / current.value // e.g. current=100, prev=200
        : current.value / prev.value; // e.g. current=200, prev=100
}

// src/config.ts getPercentageInput, reading its input from an argument
function getPercentageInput(name, input) {
    if (!input) {
        return null;
    }
    if (!input.endsWith('%')) {
        throw new Error(`'${name}' input must ends with '%' for percentage value (e.g. '200%')`);
    }

    const percentage = parseFloat(input.slice(0, -1)); // Omit '%' at last
    if (isNaN(percentage)) {
        throw new Error(`Specified value '${input.slice(0, -1)}' in '${name}' input cannot be parsed as float number`);
    }

    return percentage / 100;
}

// ---------------------------------------------------------------------------------------------------
// The driver (not upstream). Standard input: {"tool", "name", "alert_threshold": "100%",
// "fail_threshold": optional, "max_items": null, "runs": [[bench, ...], ...]}, each run one job's
// output file (the list of {name, value, unit, range?, extra?} that extract.ts parses), in order.
// Standard output: per run, null where the action skips the alert check (writeBenchmark: no previous
// suite), else {"alerts": [{name, prev, current, ratio}], "failures": the names handleAlert fails on}.

function main(input) {
    const alertThreshold = getPercentageInput('alert-threshold', input.alert_threshold);
    let failThreshold = getPercentageInput('fail-threshold', input.fail_threshold);
    if (failThreshold === null) {
        failThreshold = alertThreshold;
    }
    const entries = {};
    return input.runs.map((benches, i) => {
        const bench = { commit: { id: `commit-${i}` }, date: i, tool: input.tool, benches };
        const { prevBench, normalizedCurrentBench } = addBenchmarkEntry(input.name, bench, entries,
                                                                        input.max_items ?? null);
        if (prevBench === null) {
            return null; // writeBenchmark: 'Alert check was skipped because previous benchmark result was not found'
        }
        const alerts = findAlerts(normalizedCurrentBench, prevBench, alertThreshold);
        return {
            alerts: alerts.map((a) => ({ name: a.current.name, prev: a.prev.value, current: a.current.value,
                                         ratio: a.ratio })),
            failures: alerts.filter((a) => a.ratio > failThreshold).map((a) => a.current.name),
        };
    });
}

let text = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => { text += chunk; });
process.stdin.on('end', () => { process.stdout.write(JSON.stringify(main(JSON.parse(text)))); });
