package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

// compare reads the runs that scripts/loadpair.sh left in dir (BUILD-ROUND-SCENARIOS.json,
// each what -json prints) and writes, for every figure, each build's median with the range
// of its runs, and the ratio of each build's median to base's (the first build by name when
// empty). Runs that reported errors are counted apart and left out of the figures.
func compare(w io.Writer, dir, base string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	type key struct{ scenario, name string }
	values := map[key]map[string][]float64{}
	units := map[key]string{}
	var order []key
	var builds []string
	failed := map[string]int{}
	for _, f := range files {
		build, _, ok := strings.Cut(filepath.Base(f), "-")
		if !ok {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var run struct {
			ErrorCount int      `json:"errorCount"`
			Figures    []figure `json:"figures"`
		}
		if err := json.Unmarshal(b, &run); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if !slices.Contains(builds, build) {
			builds = append(builds, build)
		}
		if run.ErrorCount > 0 {
			failed[build]++
			continue
		}
		for _, fig := range run.Figures {
			k := key{fig.Scenario, fig.Name}
			if values[k] == nil {
				values[k] = map[string][]float64{}
				order = append(order, k)
			}
			values[k][build] = append(values[k][build], fig.Value)
			units[k] = fig.Unit
		}
	}
	if len(builds) == 0 {
		return fmt.Errorf("no runs in %s", dir)
	}
	slices.Sort(builds)
	if base == "" {
		base = builds[0]
	} else if !slices.Contains(builds, base) {
		return fmt.Errorf("no runs of %q in %s", base, dir)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "scenario\tfigure")
	for _, b := range builds {
		fmt.Fprintf(tw, "\t%s", b)
		if b != base {
			fmt.Fprintf(tw, "\t%s/%s", b, base)
		}
	}
	fmt.Fprintln(tw)
	for _, k := range order {
		fmt.Fprintf(tw, "%s\t%s", k.scenario, k.name)
		baseMedian := median(values[k][base])
		for _, b := range builds {
			vs := values[k][b]
			if len(vs) == 0 {
				fmt.Fprint(tw, "\t")
			} else {
				fmt.Fprintf(tw, "\t%s (%s to %s, n=%d)", formatNumber(median(vs), units[k]), formatNumber(slices.Min(vs), ""), formatNumber(slices.Max(vs), ""), len(vs))
			}
			if b != base {
				if m := median(vs); len(vs) > 0 && baseMedian != 0 {
					fmt.Fprintf(tw, "\t%.2fx", m/baseMedian)
				} else {
					fmt.Fprint(tw, "\t")
				}
			}
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, b := range builds {
		if failed[b] > 0 {
			fmt.Fprintf(w, "%s: %d runs reported errors and are left out\n", b, failed[b])
		}
	}
	return nil
}

// median is the middle of vs (the mean of the two middle ones for an even count).
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.SortFunc(s, cmp.Compare[float64])
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// formatNumber writes v with three significant digits or so, and its unit.
func formatNumber(v float64, unit string) string {
	s := fmt.Sprintf("%.3g", v)
	if v >= 1000 || v <= -1000 {
		s = fmt.Sprintf("%.0f", v)
	}
	if unit != "" {
		s += " " + unit
	}
	return s
}
