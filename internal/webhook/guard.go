package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// ErrRefusedAddress: a delivery's address is one the fleet does not send
// to (Guard).
var ErrRefusedAddress = errors.New("webhook: address refused")

// Guard decides which addresses a delivery may connect to. It is checked
// on the address dialled, after the name was resolved (a net.Dialer's
// Control), so a name that resolves to a private address, at once or on
// a later lookup, is refused all the same.
type Guard struct {
	// AllowPrivate lets deliveries go to every address (the operator's
	// --webhook-allow-private): loopback, private, link-local and the rest.
	AllowPrivate bool
	// Allow are prefixes deliveries may reach although they are refused
	// by default (--webhook-allow CIDR,...).
	Allow []netip.Prefix
	// Own are the fleet's own listen addresses (the API's, the metrics'),
	// refused unless Allow covers them or AllowPrivate.
	Own []netip.AddrPort
}

// refused are the ranges refused by default, with why.
var refused = []struct {
	p   netip.Prefix
	why string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified/this-network"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT (RFC 6598)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (cloud metadata)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private (RFC 1918)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private (RFC 1918)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking (RFC 2544)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fc00::/7"), "unique local (ULA)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64 (may map a private IPv4 address)"},
	{netip.MustParsePrefix("2002::/16"), "6to4 (may map a private IPv4 address)"},
}

// ParseAllow reads --webhook-allow: CIDR prefixes or addresses, comma
// separated.
func ParseAllow(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("webhook: %q is neither a CIDR prefix nor an address", f)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// Check says whether a delivery may connect to ap, and why not.
func (g *Guard) Check(ap netip.AddrPort) error {
	if g.AllowPrivate {
		return nil
	}
	a := ap.Addr().Unmap()
	for _, p := range g.Allow {
		if p.Contains(a) {
			return nil
		}
	}
	for _, own := range g.Own {
		o := own.Addr().Unmap()
		if own.Port() == ap.Port() && o == a {
			return fmt.Errorf("%w: %s is the fleet's own listen address %s", ErrRefusedAddress, ap, own)
		}
	}
	for _, r := range refused {
		if r.p.Contains(a) {
			return fmt.Errorf("%w: %s is %s (maker serve --webhook-allow CIDR or --webhook-allow-private to allow it)", ErrRefusedAddress, a, r.why)
		}
	}
	return nil
}

// control is a net.Dialer's Control: it checks the address about to be
// connected to.
func (g *Guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q is not an address", ErrRefusedAddress, address)
	}
	return g.Check(ap)
}

// Dialer is a net.Dialer whose connections Guard checks.
func (g *Guard) Dialer(d net.Dialer) *net.Dialer {
	d.Control = g.control
	return &d
}

// OwnAddrs are the addresses a listener on addr answers on: addr itself,
// or every interface's address when addr is unspecified (0.0.0.0, ::).
func OwnAddrs(addr net.Addr) []netip.AddrPort {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return nil
	}
	ap := tcp.AddrPort()
	if !ap.Addr().Unmap().IsUnspecified() {
		return []netip.AddrPort{netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}
	}
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.AddrPort
	for _, ia := range ifs {
		if n, ok := ia.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, netip.AddrPortFrom(a.Unmap(), ap.Port()))
			}
		}
	}
	return out
}
