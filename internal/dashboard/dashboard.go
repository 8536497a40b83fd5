package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
)

// Path is where the dashboard is served.
const Path = "/dashboard/"

//go:embed assets
var assets embed.FS

// Handler serves the dashboard's assets under Path: index.html, app.js
// and style.css. They are public (no key): they hold no data.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree always has assets/
	}
	files := http.StripPrefix(Path, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		// Only our own scripts and styles; data only from this origin.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "+
			"connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// Wrap serves the dashboard under Path, redirects GET / there, and passes
// every other request to api.
func Wrap(api http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(Path, Handler())
	mux.Handle("GET /{$}", http.RedirectHandler(Path, http.StatusFound))
	mux.Handle("/", api)
	return mux
}
