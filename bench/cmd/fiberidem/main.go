// Command fiberidem is the gofiber peer: fiber v2 with its idempotency
// middleware (in-memory storage and lock, both per process, as its docs
// show) in front of the same trivial operation. Its key header is
// X-Idempotency-Key and its keys must be 36 characters long (a UUID).
// With -bare it runs without the middleware: the framework's own floor, so
// that the middleware's overhead is measured over its framework, as idem's
// middleware is over net/http.
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/idempotency"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/idem-dev/idem/bench/internal/app"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18083", "address to listen on")
	bare := flag.Bool("bare", false, "run without the idempotency middleware (the fiber baseline)")
	flag.Parse()
	var c app.Counter
	f := fiber.New(fiber.Config{DisableStartupMessage: true})
	// Lifetime 24 h: idem's default TTL (fiber's default is 30 min).
	if !*bare {
		f.Use(idempotency.New(idempotency.Config{Lifetime: 24 * time.Hour}))
	}
	f.Post(app.PathOperation, func(ctx *fiber.Ctx) error {
		if d, err := time.ParseDuration(ctx.Get(app.HeaderDelay)); err == nil && d > 0 {
			time.Sleep(min(d, 5*time.Second))
		}
		ctx.Set("Content-Type", "application/json")
		// fiber reuses its buffers: the key outlives the request in the counts.
		key := utils.CopyString(ctx.Get("X-Idempotency-Key"))
		return ctx.Status(fiber.StatusCreated).Send(c.Hit(key))
	})
	f.Get(app.PathCounts, func(ctx *fiber.Ctx) error {
		ctx.Set("Content-Type", "application/json")
		return ctx.Send(c.JSON(ctx.Query("per_key") == "1"))
	})
	f.Post(app.PathReset, func(ctx *fiber.Ctx) error {
		c.Reset()
		return ctx.SendStatus(fiber.StatusNoContent)
	})
	f.Get(app.PathHealth, func(ctx *fiber.Ctx) error { return ctx.SendString("ok\n") })

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		_ = f.ShutdownWithTimeout(5 * time.Second)
	}()
	if err := f.Listen(*listen); err != nil {
		log.Fatal(err)
	}
}
