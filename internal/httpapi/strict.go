package httpapi

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// encoding/json takes the last of two equal keys and matches a key to a
// field without regard to case, so {"id":"a","id":"b"} and {"ID":"b"} both
// decode as {"id":"b"}. A body that says two things, or says them in
// another spelling, is one that a second reader (a proxy, a log, a
// signature check, a later version of ours) may read differently; the API
// refuses both and names the key. checkKeys does it in a second pass over
// a body encoding/json has decoded, so that every other mistake is still
// reported in encoding/json's words.

// keyError is what checkKeys finds: a key twice in one object, or a key
// that matches a field only when case is ignored.
type keyError struct {
	key  string // as the body spells it
	want string // the field's spelling, for a key in the wrong case; "" for a duplicate
	at   string // where the object is, e.g. "reports[0]"; "" at the top
}

func (e *keyError) Error() string {
	var msg string
	if e.want == "" {
		msg = fmt.Sprintf("the request body has the key %q twice", e.key)
	} else {
		msg = fmt.Sprintf("the request body has the key %q where %q is meant: keys are case-sensitive", e.key, e.want)
	}
	if e.at != "" {
		msg += ", in " + e.at
	}
	return msg
}

// checkKeys walks body, one JSON value encoding/json has decoded into a
// value of type t, and returns a *keyError for the first object with a
// key twice or a key whose case differs from its field's. Below a value
// that decodes itself (json.Unmarshaler, encoding.TextUnmarshaler) or an
// interface, only duplicates are looked for. Any other error means body is
// not one JSON value, which the caller has ruled out.
func checkKeys(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	return walkValue(dec, t, "")
}

// walkValue reads one value of type t (nil: unknown) at path.
func walkValue(dec *json.Decoder, t reflect.Type, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	t = plain(t)
	switch d {
	case '{':
		return walkObject(dec, t, path)
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walkValue(dec, elem, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	}
	return fmt.Errorf("unexpected %v", d)
}

// walkObject reads the rest of an object whose '{' was read.
func walkObject(dec *json.Decoder, t reflect.Type, path string) error {
	var fields *fieldSet
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = fieldsOf(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("key %v is not a string", tok)
		}
		if seen[key] {
			return &keyError{key: key, at: path}
		}
		seen[key] = true
		ft := elem
		if fields != nil {
			var exact bool
			var name string
			ft, name, exact = fields.lookup(key)
			if !exact && name != "" {
				return &keyError{key: key, want: name, at: path}
			}
		}
		if err := walkValue(dec, ft, join(path, key)); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return err
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// plain returns t without pointers, or nil when what t holds is not known
// field by field: an interface, or a type that decodes itself
// (time.Time, json.RawMessage).
func plain(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() == reflect.Interface {
		return nil
	}
	p := reflect.PointerTo(t)
	if p.Implements(jsonUnmarshaler) || p.Implements(textUnmarshaler) {
		return nil
	}
	return t
}

// fieldSet is the JSON keys of a struct type as encoding/json names them.
type fieldSet struct {
	names []string
	types map[string]reflect.Type
}

// lookup returns key's field type and name: exact when key is the field's
// own spelling. For a key that is no field's, name is "" and so is the type.
func (f *fieldSet) lookup(key string) (t reflect.Type, name string, exact bool) {
	if t, ok := f.types[key]; ok {
		return t, key, true
	}
	// checkKeys runs on what encoding/json has decoded, refusing unknown
	// fields, so a key that is no field's own spelling is one it matched
	// to a field ignoring case; strings.EqualFold finds which (its
	// folding is, if anything, broader than encoding/json's).
	for _, n := range f.names {
		if strings.EqualFold(n, key) {
			return f.types[n], n, false
		}
	}
	return nil, "", false
}

// fieldCache holds a *fieldSet by struct type.
var fieldCache sync.Map

func fieldsOf(t reflect.Type) *fieldSet {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*fieldSet)
	}
	f := &fieldSet{types: make(map[string]reflect.Type)}
	collectFields(t, f, make(map[reflect.Type]bool))
	fieldCache.Store(t, f)
	return f
}

// collectFields adds the fields of t, and those an untagged embedded
// struct promotes, as encoding/json sees them: exported or embedded, the
// tag's name or the Go name, "-" left out. A name at a shallower depth
// hides a deeper one; the wire types have no two fields of one name at one
// depth, for which encoding/json would decode neither.
func collectFields(t reflect.Type, f *fieldSet, visiting map[reflect.Type]bool) {
	if visiting[t] {
		return
	}
	visiting[t] = true
	defer delete(visiting, t)
	var later []reflect.Type
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" {
			et := sf.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				later = append(later, et)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if _, ok := f.types[name]; !ok {
			f.types[name] = sf.Type
			f.names = append(f.names, name)
		}
	}
	for _, et := range later {
		collectFields(et, f, visiting)
	}
}
