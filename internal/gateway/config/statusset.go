package config

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/idem-dev/idem/idemhttp"
)

// parseStatusSet parses a list such as "2xx, 409" or "200-299,409" or "all".
func parseStatusSet(list []string) (idemhttp.StatusSet, error) {
	var s idemhttp.StatusSet
	for _, item := range list {
		for _, f := range strings.Split(item, ",") {
			f = strings.ToLower(strings.TrimSpace(f))
			switch {
			case f == "":
			case f == "all" || f == "*":
				s = append(s, [2]int{100, 599})
			case len(f) == 3 && strings.HasSuffix(f, "xx") && f[0] >= '1' && f[0] <= '5':
				base := int(f[0]-'0') * 100
				s = append(s, [2]int{base, base + 99})
			case strings.Contains(f, "-"):
				lo, hi, _ := strings.Cut(f, "-")
				a, err1 := strconv.Atoi(strings.TrimSpace(lo))
				b, err2 := strconv.Atoi(strings.TrimSpace(hi))
				if err1 != nil || err2 != nil || a < 100 || b > 599 || a > b {
					return nil, fmt.Errorf("bad status range %q", f)
				}
				s = append(s, [2]int{a, b})
			default:
				n, err := strconv.Atoi(f)
				if err != nil || n < 100 || n > 599 {
					return nil, fmt.Errorf("bad status %q", f)
				}
				s = append(s, [2]int{n, n})
			}
		}
	}
	sort.Slice(s, func(i, j int) bool { return s[i][0] < s[j][0] })
	return s, nil
}
