// Package shrink gives back the room of maps that a crowd grew. A Go map keeps the
// buckets it grew to after its keys are deleted, so a cache that held a hundred thousand
// users keeps their room once they have gone; Map makes such a map anew at its size.
package shrink

// Min is the fewest entries a map must have held for Map to make it anew: below it the
// room is not worth a copy.
const Min = 1024

// Map returns m made anew at its present size when it holds fewer than a quarter of the
// peak entries it held since it was made (peak at least Min), and the peak to keep from
// now on; otherwise m and peak as they are. The caller keeps peak up to date as m grows.
func Map[K comparable, V any](m map[K]V, peak int) (map[K]V, int) {
	n := len(m)
	if peak < Min || n >= peak/4 {
		return m, peak
	}
	fresh := make(map[K]V, n) // maps.Clone would keep the room
	for k, v := range m {
		fresh[k] = v
	}
	return fresh, n
}
