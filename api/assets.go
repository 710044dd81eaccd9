package api

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

// The dashboard is hand-written HTML, CSS and JavaScript modules embedded in the binary: no
// build step, no CDN, nothing fetched at run time. index.html loads ui/js/main.js, which
// imports the other modules by relative path, so they are all served under /assets/js/.
//
//go:embed ui
var uiFiles embed.FS

// assetTypes fixes the types the dashboard depends on rather than take them from the
// machine's mime.types: browsers run a module script only when it is served as JavaScript,
// and nosniff makes them hold stylesheets to text/css.
var assetTypes = map[string]string{
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".html": "text/html; charset=utf-8",
	".svg":  "image/svg+xml",
}

type asset struct {
	body  []byte
	etag  string
	ctype string
}

var assets = func() map[string]asset {
	out := map[string]asset{}
	err := fs.WalkDir(uiFiles, "ui", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".tmpl") {
			return err
		}
		body, err := uiFiles.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ctype := assetTypes[path.Ext(p)]
		if ctype == "" {
			ctype = mime.TypeByExtension(path.Ext(p))
		}
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		out[strings.TrimPrefix(p, "ui/")] = asset{body: body, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, ctype: ctype}
		return nil
	})
	if err != nil {
		panic(err)
	}
	return out
}()

// serveAsset answers with an ETag, so browsers revalidate each load for a few bytes and
// always run the assets of the binary they talk to: the modules of one page then never mix
// two versions of the dashboard, as they could under max-age after an upgrade.
func serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	a, ok := assets[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", a.ctype)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("ETag", a.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}

func assetHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveAsset(w, r, strings.TrimPrefix(r.URL.Path, "/assets/"))
	})
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) { serveAsset(w, r, "index.html") }

var loginTemplate = template.Must(template.ParseFS(uiFiles, "ui/login.html.tmpl"))

// loginPage is the sign-in form, with msg saying why the last attempt failed and role
// filled in again.
func loginPage(w http.ResponseWriter, code int, msg, role string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = loginTemplate.Execute(w, map[string]string{"Message": msg, "Role": role})
}
